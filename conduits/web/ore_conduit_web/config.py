"""Settings of the web conduit: the `[plugins.web]` table (or `--set key=value`)."""

from __future__ import annotations

import getpass
import ipaddress
import re
from pathlib import Path

import platformdirs
from pydantic import Field, field_validator, model_validator

from ore_core.conduit import ConduitConfig

__all__ = ["USER_NAME", "WebConfig", "default_state_dir", "default_user", "is_loopback"]

USER_NAME = re.compile(r"[A-Za-z0-9_.@-]{1,64}")
"""What a user name may be: it lands in thread metadata and in the tokens file."""


def default_state_dir() -> Path:
    """Where the conduit keeps its tokens file."""
    return Path(platformdirs.user_state_dir("ore")) / "web"


def default_user() -> str:
    """The login name: the user the generated token signs in (`web` when unknown)."""
    try:
        name = getpass.getuser()
    except OSError:  # no login name in a bare container
        return "web"
    return name if USER_NAME.fullmatch(name) else "web"


def is_loopback(host: str) -> bool:
    """True for `localhost` and loopback addresses: only this machine can connect."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class WebConfig(ConduitConfig):
    """Where the page is served and who may use it.

    `host`/`port`: the address (the default port, when taken, falls back to a free one,
    said on the console; a port you set is refused when taken). `user`: the user of the
    token generated on first run (kept in `state_dir/tokens.json`, mode 0600). `users`:
    more users, `name = "token"` each (tokens of at least 16 characters). `auth = false`
    lets anyone who reaches the port in as `user`: allowed on loopback only.
    `max_message_length` bounds a message in characters; `max_body_bytes` a request body.
    """

    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535)
    state_dir: Path = Field(default_factory=default_state_dir)
    user: str = Field(default_factory=default_user)
    users: dict[str, str] = Field(default_factory=dict)
    auth: bool = True
    max_message_length: int = Field(default=32_000, ge=1)
    max_body_bytes: int = Field(default=1024 * 1024, ge=1024)

    @field_validator("user")
    @classmethod
    def _check_user(cls, user: str) -> str:
        if USER_NAME.fullmatch(user) is None:
            raise ValueError(f"user {user!r}: use 1-64 characters from A-Z a-z 0-9 _ . @ -")
        return user

    @field_validator("users")
    @classmethod
    def _check_users(cls, users: dict[str, str]) -> dict[str, str]:
        for name, token in users.items():
            if USER_NAME.fullmatch(name) is None:
                raise ValueError(f"user {name!r}: use 1-64 characters from A-Z a-z 0-9 _ . @ -")
            if len(token) < 16:
                raise ValueError(f"the token of user {name!r} is shorter than 16 characters")
        return users

    @model_validator(mode="after")
    def _token_off_loopback(self) -> WebConfig:
        if not self.auth and not is_loopback(self.host):
            raise ValueError(
                f"host {self.host!r} is reachable from other machines: serving it needs a "
                "token, so remove `auth = false` (or bind 127.0.0.1)"
            )
        return self
