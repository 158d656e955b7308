"""Files on the page: uploads through the API, and a thread's files served back.

An upload is checked against the operator's `[files]` policy (the one the conduit's
client holds: size first, from `Content-Length`, then the media type) before a byte is
read, read whole (a cut-short body stores nothing) and stored once by content with
`ConduitClient.upload`. The page gets an upload id, not the reference: a message names
its files by those ids, which only the user who uploaded them may use, so nobody can
attach a file of another thread by guessing its sha256 (the core would then serve it).

A file is served only as an attachment of a turn of a thread the user sees, fetched
through the core (`ConduitClient.fetch`, which checks the thread reaches the file):
the name comes from the attachment, never from the URL, and nothing touches the disk.
"""

from __future__ import annotations

import secrets
from collections import OrderedDict
from collections.abc import AsyncIterator, Sequence
from urllib.parse import quote

from pydantic import BaseModel

from ore_conduit_web.threads import WebError
from ore_conduit_web.tree import INLINE_TYPES
from ore_core.artifacts import Attachment
from ore_core.errors import ArtifactError
from ore_core.files import FilePolicy, guess_media_type

__all__ = [
    "Upload",
    "Uploads",
    "check_file",
    "disposition",
    "media_type_of",
    "read_upload",
    "refuse",
]

_KEPT = 1000
"""Uploads remembered (per process) until a message names them; older ones are forgotten."""


class Upload(BaseModel):
    """A stored upload: its `id` goes in a message's `files`."""

    id: str
    name: str
    media_type: str
    size: int


class Uploads:
    """The uploads of this process not yet sent, by id, each for the user who made it."""

    def __init__(self) -> None:
        self._kept: OrderedDict[str, tuple[str, Attachment]] = OrderedDict()

    def add(self, user: str, attachment: Attachment) -> Upload:
        """Remember an upload of `user`; its id."""
        upload_id = secrets.token_urlsafe(16)
        self._kept[upload_id] = (user, attachment)
        while len(self._kept) > _KEPT:
            self._kept.popitem(last=False)
        return Upload(
            id=upload_id,
            name=attachment.name,
            media_type=attachment.media_type,
            size=attachment.size,
        )

    def take(self, user: str, ids: Sequence[str]) -> list[Attachment]:
        """The attachments of `ids`, uploads of `user` (WebError 400 for any other)."""
        found = []
        for upload_id in ids:
            kept = self._kept.get(upload_id)
            if kept is None or kept[0] != user:
                raise WebError(
                    400, "unknown_file", f"no upload {upload_id[:24]!r}: upload the file again"
                )
            found.append(kept[1])
        return found


def media_type_of(name: str, content_type: str | None) -> str:
    """The upload's media type: the request's, else (none, or the generic
    `application/octet-stream` a browser sends for what it does not know) the name's."""
    declared = (content_type or "").split(";", 1)[0].strip().lower()
    if declared and declared != "application/octet-stream":
        return declared
    return guess_media_type(name)


def refuse(policy: FilePolicy, name: str, media_type: str, size: int) -> None:
    """WebError 413 for a file over the size limit, 415 for a type not allowed."""
    reason = policy.refusal(name, media_type, size)
    if reason is not None:
        status, code = (413, "too_large") if size > policy.max_size else (415, "unsupported_type")
        raise WebError(status, code, reason)


async def read_upload(
    chunks: AsyncIterator[bytes], policy: FilePolicy, name: str, declared: int | None
) -> bytes:
    """The whole body, or WebError: 413 past the size limit (counted as it arrives, so
    a body without `Content-Length` is cut off too), 400 when it ends short of
    `declared` bytes (a truncated upload: nothing is stored)."""
    body = bytearray()
    async for chunk in chunks:
        body += chunk
        if len(body) > policy.max_size:
            refuse(policy, name, "", len(body))
    if declared is not None and len(body) != declared:
        raise WebError(
            400, "truncated", f"{name}: {len(body)} of {declared} bytes arrived; send it again"
        )
    return bytes(body)


def check_file(name: str, media_type: str) -> None:
    """WebError 400 unless an attachment may have this name and media type."""
    try:
        Attachment(name, media_type, 0, "0" * 64, "b")
    except ArtifactError as exc:
        raise WebError(400, "bad_request", str(exc)) from None


def disposition(attachment: Attachment) -> str:
    """`Content-Disposition`: inline for the images the page shows, else a download,
    with the attachment's name (RFC 6266: an ASCII fallback and the UTF-8 name)."""
    kind = "inline" if attachment.media_type in INLINE_TYPES else "attachment"
    fallback = "".join(
        c if c.isascii() and c.isprintable() and c not in '"\\' else "_" for c in attachment.name
    )
    return f"{kind}; filename=\"{fallback}\"; filename*=UTF-8''{quote(attachment.name, safe='')}"
