"""MatrixConfig: the `[plugins.matrix]` table of ore.toml.

```toml
[plugins.matrix]
homeserver = "https://matrix.example.org"
user_id = "@ore:example.org"
# The password (or an access token) is best left to the environment:
# MATRIX_PASSWORD or MATRIX_ACCESS_TOKEN (or ORE_PLUGINS__MATRIX__PASSWORD, ...).
```

Every key is documented on its field below and in the package README.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import platformdirs
from pydantic import Field, SecretStr, field_validator

from ore_core import OreError
from ore_core.conduit import ConduitConfig, DurableName, StateDir

__all__ = ["ENV_ACCESS_TOKEN", "ENV_PASSWORD", "MatrixConfig", "MissingCredentials"]

ENV_PASSWORD = "MATRIX_PASSWORD"
ENV_ACCESS_TOKEN = "MATRIX_ACCESS_TOKEN"
_USER_ID = re.compile(r"@[^:\s]+:\S+")


def default_state_dir() -> Path:
    """`matrix` in ore's user state directory (`~/.local/state/ore/matrix` on Linux)."""
    return Path(platformdirs.user_state_dir("ore")) / "matrix"


class MissingCredentials(OreError):
    """The homeserver, the user, the password or the access token is missing or refused."""


class MatrixConfig(ConduitConfig):
    """Which homeserver and bot account, where the state lives, how it answers."""

    homeserver: str = ""
    """The homeserver's client URL (`https://matrix.example.org`)."""
    user_id: str = ""
    """The bot account (`@ore:example.org`); needed with a password, checked with a token."""
    password: SecretStr | None = None
    """The bot account's password; default: MATRIX_PASSWORD. Used once: the session it
    makes (access token and device) is kept in `state_dir` and used from then on."""
    access_token: SecretStr | None = None
    """An access token of the bot account instead of a password; default:
    MATRIX_ACCESS_TOKEN."""
    device_name: str = "ore"
    """The name of the device a password login creates (shown in the account's sessions)."""
    auto_join: bool = True
    """Join the rooms the bot is invited to."""
    invites_from: tuple[str, ...] = ()
    """Only these users' invites are accepted (`@alice:example.org`); empty: anyone's."""
    command_prefix: str = Field(default="!", min_length=1, max_length=3)
    """A message starting with this and a word is a command (`!new`, `!stop`): Matrix
    clients keep `/` for their own commands."""
    sync_timeout: int = Field(default=30_000, ge=0, le=120_000)
    """Milliseconds one `/sync` waits for news (long polling)."""
    durable: DurableName = "matrix"
    """The durable consumer keeping the conduit's place in ore's output across restarts."""
    state_dir: StateDir = Field(default_factory=default_state_dir)
    """Where the conduit keeps its state (`state-<durable>.db`): the session, the sync
    token, the conversation of each message. One directory per bot account."""

    @field_validator("user_id")
    @classmethod
    def _check_user(cls, user_id: str) -> str:
        if user_id and not _USER_ID.fullmatch(user_id):
            raise ValueError("must be a Matrix user id, e.g. @ore:example.org")
        return user_id

    @field_validator("homeserver")
    @classmethod
    def _check_homeserver(cls, url: str) -> str:
        if url and not url.startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// URL, e.g. https://matrix.org")
        return url.rstrip("/")

    def check_secrets(self) -> None:
        """The homeserver is named and a password (with the user) or a token is set."""
        if not self.homeserver:
            raise MissingCredentials(
                "homeserver is not set: set homeserver in [plugins.matrix] "
                "(or ORE_PLUGINS__MATRIX__HOMESERVER), e.g. https://matrix.example.org"
            )
        if self.token() or self.secret_password():
            if not self.token() and not self.user_id:
                raise MissingCredentials(
                    "user_id is not set: a password login needs the bot's user id "
                    "(user_id in [plugins.matrix], e.g. @ore:example.org)"
                )
            return
        raise MissingCredentials(
            f"neither {ENV_ACCESS_TOKEN} nor {ENV_PASSWORD} is set: export one "
            "(or set access_token or password in [plugins.matrix])"
        )

    def token(self) -> str:
        """The access token from this table, else MATRIX_ACCESS_TOKEN; empty if none."""
        return _secret(self.access_token, ENV_ACCESS_TOKEN)

    def secret_password(self) -> str:
        """The password from this table, else MATRIX_PASSWORD; empty if none."""
        return _secret(self.password, ENV_PASSWORD)


def _secret(value: SecretStr | None, variable: str) -> str:
    text = value.get_secret_value() if value is not None else os.environ.get(variable, "")
    return text.strip()
