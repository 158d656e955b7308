"""SlackConfig: the `[plugins.slack]` table of ore.toml.

```toml
[plugins.slack]
mode = "socket"            # or "http" (the Events API; needs signing_secret)
# Secrets are best left to the environment: SLACK_BOT_TOKEN, SLACK_APP_TOKEN,
# SLACK_SIGNING_SECRET (or ORE_PLUGINS__SLACK__BOT_TOKEN, ...).
on_edit = "branch"         # or "ignore"
streaming = "auto"         # "native" streams, "edit" (post + chat.update), or auto
```

Every key is documented on its field below and in the package README.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Literal

import platformdirs
from pydantic import Field, SecretStr, field_validator

from ore_core import OreError
from ore_core.conduit import ConduitConfig, DurableName, StateDir

__all__ = ["ENV_APP_TOKEN", "ENV_BOT_TOKEN", "ENV_SIGNING_SECRET", "MissingSecret", "SlackConfig"]

ENV_BOT_TOKEN = "SLACK_BOT_TOKEN"
ENV_APP_TOKEN = "SLACK_APP_TOKEN"
ENV_SIGNING_SECRET = "SLACK_SIGNING_SECRET"

_PATH = re.compile(r"/[A-Za-z0-9/_.-]*")


def default_state_dir() -> Path:
    """`slack` in ore's user state directory (`~/.local/state/ore/slack` on Linux)."""
    return Path(platformdirs.user_state_dir("ore")) / "slack"


_SecretName = Literal["bot_token", "app_token", "signing_secret"]
_VARIABLES: dict[_SecretName, str] = {
    "bot_token": ENV_BOT_TOKEN,
    "app_token": ENV_APP_TOKEN,
    "signing_secret": ENV_SIGNING_SECRET,
}
"""The environment variable of each secret (read when the table does not set it)."""
_TOKEN_PREFIXES = {"bot_token": "xoxb-", "app_token": "xapp-"}
"""How Slack's tokens of each kind begin (a user token `xoxp-` is not a bot token)."""


class MissingSecret(OreError):
    """A token or the signing secret is missing or refused; the message names the variable."""


class SlackConfig(ConduitConfig):
    """How the Slack conduit connects, and how it renders replies."""

    mode: Literal["socket", "http"] = "socket"
    """`socket`: Socket Mode (no public URL; needs the app token). `http`: the Events API."""
    bot_token: SecretStr | None = None
    """The bot token `xoxb-...`; default: the environment variable SLACK_BOT_TOKEN."""
    app_token: SecretStr | None = None
    """The app-level token `xapp-...` (Socket Mode); default: SLACK_APP_TOKEN."""
    signing_secret: SecretStr | None = None
    """The app's signing secret (HTTP mode); default: SLACK_SIGNING_SECRET."""
    api_url: str = "https://slack.com/api/"
    """Base URL of the Web API (tests point it at a local fake)."""
    http_host: str = "0.0.0.0"
    """HTTP mode: the address to listen on."""
    http_port: int = Field(default=3000, ge=0, le=65535)
    """HTTP mode: the port (0: any free port)."""
    http_path: str = "/slack/events"
    """HTTP mode: the Request URL's path."""
    on_edit: Literal["branch", "ignore"] = "branch"
    """An edit of the latest message of a thread answers it again on a branch, or is ignored."""
    streaming: Literal["auto", "native", "edit"] = "auto"
    """`native`: chat.startStream/appendStream/stopStream; `edit`: post + chat.update;
    `auto`: native, falling back to edit where streams are refused or their budget is spent."""
    reply_in_owned_threads: bool = True
    """Answer every reply in a thread the bot is part of, without a fresh @mention."""
    allow_bots: tuple[str, ...] = ()
    """Bot ids (`B...`) whose messages are answered; all other bots are ignored."""
    status: str = "is thinking…"
    """The assistant status shown while a turn runs (empty: none)."""
    durable: DurableName = "slack"
    """The durable consumer keeping the conduit's place in ore's output across restarts."""
    state_dir: StateDir = Field(default_factory=default_state_dir)
    """Where the inbox is kept (`inbox-<durable>.db`): the Slack events acknowledged and not
    yet handed to the core. Give replicas on one host a directory each."""
    flush_chars: int = Field(default=200, ge=1)
    """Streamed text is sent once this many characters are pending..."""
    flush_interval: float = Field(default=0.8, gt=0)
    """...or once this many seconds have passed since the last send."""
    stream_max_age: float = Field(default=240.0, gt=0)
    """A native stream is finished and continued in a new message after this many seconds
    (Slack ends streams after about 5 minutes)."""
    message_chars: int = Field(default=11_000, ge=200, le=12_000)
    """Most characters in one message (Slack refuses about 12k in a stream or markdown_text)."""
    stream_starts_per_minute: int = Field(default=30, ge=1)
    """Native streams started per minute and workspace before falling back to edits."""
    edit_interval: float = Field(default=1.2, ge=0)
    """Seconds between two intermediate edits of one message (edit mode)."""
    updates_per_minute: int = Field(default=50, ge=1)
    """chat.update calls per minute for the whole workspace (Slack's Tier 3)."""
    ping_interval: float = Field(default=10.0, gt=0)
    """Socket Mode: seconds between pings (and between reconnect attempts)."""
    dedupe_ttl: float = Field(default=900.0, ge=600)
    """Seconds an event is remembered to drop Slack's retries (its last retry comes ~5 min late)."""

    @field_validator("http_path")
    @classmethod
    def _check_path(cls, path: str) -> str:
        if not _PATH.fullmatch(path):
            raise ValueError("must be a URL path starting with / (e.g. /slack/events)")
        return path

    def check_secrets(self) -> None:
        """Every secret of the mode is set (all missing ones named at once) and of its kind."""
        needed: list[_SecretName] = [
            "bot_token",
            "app_token" if self.mode == "socket" else "signing_secret",
        ]
        missing = [name for name in needed if not self._text(name)]
        if len(missing) > 1:
            raise MissingSecret(
                f"{' and '.join(_VARIABLES[name] for name in missing)} are not set: export "
                f"them (or set {' and '.join(missing)} in [plugins.slack])"
            )
        for name in needed:
            self.secret(name)

    def secret(self, name: _SecretName) -> str:
        """The secret from this table, else its environment variable; MissingSecret if neither."""
        variable = _VARIABLES[name]
        text = self._text(name)
        if not text:
            raise MissingSecret(
                f"{variable} is not set: export it (or set {name} in [plugins.slack])"
            )
        prefix = _TOKEN_PREFIXES.get(name, "")
        if not text.startswith(prefix):
            # Never sent to Slack: a token of the wrong kind is refused here, naming it.
            raise MissingSecret(
                f"{variable} does not start with {prefix}: use the app's "
                + ("Bot User OAuth Token" if name == "bot_token" else "app-level token")
                + f" ({prefix}...), from the app's settings at https://api.slack.com/apps"
            )
        return text

    def _text(self, name: _SecretName) -> str:
        value: SecretStr | None = getattr(self, name)
        text = (
            value.get_secret_value() if value is not None else os.environ.get(_VARIABLES[name], "")
        )
        return text.strip()
