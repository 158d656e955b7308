"""Who is asking: bearer tokens per user, the first one generated and kept on disk.

The tokens file (`state_dir/tokens.json`, `{"users": {name: token}}`) is created with
mode 0600 on first run, like Jupyter's token: whoever can read it can sign in. Tokens
from the config are added to it in memory, never written.
"""

from __future__ import annotations

import hmac
import json
import os
import secrets
from collections.abc import Mapping
from pathlib import Path

from ore_core.errors import OreError

__all__ = ["TOKENS_FILE", "Tokens", "TokensError"]

TOKENS_FILE = "tokens.json"


class TokensError(OreError):
    """The tokens file cannot be read or written; the message names it."""


class Tokens:
    """Maps a presented token to its user, in constant time per known token."""

    def __init__(self, users: Mapping[str, str]) -> None:
        self._users = dict(users)

    @classmethod
    def load(cls, state_dir: Path, user: str, extra: Mapping[str, str] | None = None) -> Tokens:
        """The tokens of `state_dir/tokens.json` (with one made for `user` if it has none)
        plus `extra`."""
        path = state_dir / TOKENS_FILE
        users = _read(path)
        if user not in users:
            users[user] = secrets.token_urlsafe(24)
            _write(path, users)
        return cls({**users, **dict(extra or {})})

    def token_of(self, user: str) -> str:
        """The token that signs `user` in (KeyError if none)."""
        return self._users[user]

    def user_of(self, token: str) -> str | None:
        """The user `token` belongs to, or None."""
        found = None
        presented = token.encode()
        for name, known in self._users.items():
            if hmac.compare_digest(presented, known.encode()):
                found = name
        return found


def _read(path: Path) -> dict[str, str]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise TokensError(f"cannot read the web conduit's tokens {path}: {exc}") from exc
    try:
        users = json.loads(text)["users"]
        if not isinstance(users, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in users.items()
        ):
            raise TypeError("users is not a table of strings")
    except (ValueError, KeyError, TypeError) as exc:
        raise TokensError(
            f"the web conduit's tokens file {path} is damaged ({exc}); fix it or delete it "
            "to get a new token"
        ) from exc
    return dict(users)


def _write(path: Path, users: Mapping[str, str]) -> None:
    """Write atomically, readable by its owner only from the first byte."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".tmp")
        partial.unlink(missing_ok=True)
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump({"users": dict(users)}, out, indent=2)
            out.flush()
            os.fsync(out.fileno())
        os.replace(partial, path)
    except OSError as exc:
        raise TokensError(f"cannot write the web conduit's tokens {path}: {exc}") from exc
