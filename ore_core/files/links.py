"""Signed, expiring links to files, for platforms that cannot be handed a file.

A platform that takes no file (or not this one: too large, a type it does not show)
still shows a link, when the deployment has a route that serves files
(`files.link_base`, the web conduit's `/files/link`). The core signs a token naming
the file (sha256, name, media type, size) and when it expires, with an HMAC-SHA256
key only the core holds; whoever has the link can read the file until then, through
`files.read` with the token. A token is `<payload>.<signature>`, both base64url
without padding, the payload compact JSON: it is read by the core only, so its
fields may change between versions (a link outlives no upgrade that changes them).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ore_core.artifacts.attachment import Attachment
from ore_core.errors import ArtifactError, OreError

__all__ = ["FileLinks", "LinkRefused", "LinkSettings"]


class LinkRefused(OreError):
    """A token that is forged, damaged or expired; `code` says which."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, slots=True)
class FileLinks:
    """Signs and checks the links of one deployment: `base` the serving route's URL,
    `key` the HMAC key, `ttl` seconds a link lives, `clock` the time (injectable)."""

    base: str
    key: bytes
    bucket: str
    ttl: float
    clock: Callable[[], float] = time.time

    def url(self, attachment: Attachment) -> str:
        """The link to `attachment`, valid for `ttl` seconds from now."""
        return f"{self.base.rstrip('/')}/{self.sign(attachment)}"

    def sign(self, attachment: Attachment, *, now: float | None = None) -> str:
        """A token for `attachment` expiring `ttl` seconds after `now` (the clock's)."""
        expires = int((self.clock() if now is None else now) + self.ttl)
        payload = {
            "s": attachment.sha256,
            "n": attachment.name,
            "t": attachment.media_type,
            "z": attachment.size,
            "e": expires,
        }
        body = _b64(json.dumps(payload, separators=(",", ":")).encode())
        return f"{body}.{_b64(self._mac(body))}"

    def verify(self, token: str) -> Attachment:
        """The attachment a token names; `LinkRefused` when it is not one of ours
        (`link_forged`) or past its expiry (`link_expired`)."""
        body, _, signature = token.partition(".")
        try:
            good = hmac.compare_digest(_unb64(signature), self._mac(body))
        except ValueError:
            good = False
        if not good:
            raise LinkRefused("this file link is not valid (forged or damaged)", "link_forged")
        fields = json.loads(_unb64(body))
        if self.clock() >= fields["e"]:
            raise LinkRefused("this file link has expired; ask for a new one", "link_expired")
        return _attachment(fields, self.bucket)

    def _mac(self, body: str) -> bytes:
        return hmac.new(self.key, body.encode(), hashlib.sha256).digest()


def _attachment(fields: dict[str, Any], bucket: str) -> Attachment:
    try:
        return Attachment(fields["n"], fields["t"], fields["z"], fields["s"], bucket)
    except (KeyError, ArtifactError) as exc:  # signed by us, so only an older format
        raise LinkRefused(f"this file link is not valid ({exc})", "link_forged") from None


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (ValueError, TypeError) as exc:
        raise ValueError(str(exc)) from None


@dataclass(frozen=True, slots=True)
class LinkSettings:
    """The deployment's `files.link_*` settings: `base` empty means no links; `secret`
    empty means the core's generated key."""

    base: str
    secret: str
    ttl: float
