"""TelegramConfig: the `[plugins.telegram]` table of ore.toml.

```toml
[plugins.telegram]
# The bot token is best left to the environment: TELEGRAM_BOT_TOKEN
# (or ORE_PLUGINS__TELEGRAM__TOKEN).
mode = "polling"           # or "webhook" (needs webhook_url and webhook_secret)
groups = "addressed"       # or "all": answer every message a group shows the bot
on_edit = "branch"         # or "ignore"
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

__all__ = ["ENV_TOKEN", "ENV_WEBHOOK_SECRET", "MissingToken", "TelegramConfig"]

ENV_TOKEN = "TELEGRAM_BOT_TOKEN"
ENV_WEBHOOK_SECRET = "TELEGRAM_WEBHOOK_SECRET"

_PATH = re.compile(r"/[A-Za-z0-9/_.-]*")
_SECRET = re.compile(r"[A-Za-z0-9_-]{1,256}")  # what Telegram accepts as secret_token
_BOT_TOKEN = re.compile(r"[0-9]+:[A-Za-z0-9_-]{35}")  # the shape of @BotFather's tokens


def default_state_dir() -> Path:
    """`telegram` in ore's user state directory (`~/.local/state/ore/telegram` on Linux)."""
    return Path(platformdirs.user_state_dir("ore")) / "telegram"


class MissingToken(OreError):
    """The bot token (or the webhook secret) is missing or refused; the message names it."""


class TelegramConfig(ConduitConfig):
    """How the Telegram conduit connects, whom it answers, and how it renders."""

    token: SecretStr | None = None
    """The bot token from @BotFather (`123456:ABC...`); default: TELEGRAM_BOT_TOKEN."""
    api_url: str = "https://api.telegram.org"
    """Base URL of the Bot API (a local Bot API server, or a fake in tests)."""
    mode: Literal["polling", "webhook"] = "polling"
    """`polling`: long polling with getUpdates (no public URL). `webhook`: Telegram POSTs."""
    poll_timeout: int = Field(default=25, ge=0, le=50)
    """Seconds one getUpdates waits for updates."""
    webhook_url: str = ""
    """Webhook mode: the public HTTPS URL Telegram posts to (it reaches `listen_*`);
    empty: the local listen URL (for a Bot API server on the same host)."""
    webhook_secret: SecretStr | None = None
    """Webhook mode: the secret Telegram sends in a header; default: TELEGRAM_WEBHOOK_SECRET."""
    listen_host: str = "127.0.0.1"
    """Webhook mode: the address to listen on (behind your HTTPS proxy)."""
    listen_port: int = Field(default=8443, ge=0, le=65535)
    """Webhook mode: the port (0: any free port)."""
    listen_path: str = "/telegram/webhook"
    """Webhook mode: the path of the URL."""
    groups: Literal["addressed", "all"] = "addressed"
    """In groups, answer messages addressed to the bot (a mention, a command, a reply to
    it) or every message the bot receives (see privacy mode in the README)."""
    on_edit: Literal["branch", "ignore"] = "branch"
    """An edit of the latest message of a conversation answers it again on a branch."""
    allow_bots: tuple[int, ...] = ()
    """Ids of other bots whose messages are answered; every other bot is ignored."""
    drafts: bool = True
    """Stream into a draft (sendMessageDraft) in private chats; else edit a message."""
    greeting: str = (
        "Hello! Write to me and I answer. /new starts a new conversation, /help lists the commands."
    )
    """The answer to /start."""
    durable: DurableName = "telegram"
    """The durable consumer keeping the conduit's place in ore's output across restarts."""
    state_dir: StateDir = Field(default_factory=default_state_dir)
    """Where the conduit keeps its state (`state-<durable>.db`): conversations of each
    chat, the answers it sent. One directory per bot."""
    flush_interval: float = Field(default=1.0, gt=0)
    """Seconds between two updates of a streamed answer (a draft or an edit)."""
    message_chars: int = Field(default=4096, ge=256, le=4096)
    """Most visible characters in one message (Telegram's limit is 4,096)."""
    chat_per_second: float = Field(default=1.0, gt=0)
    """Messages and edits per second in one chat (Telegram: about 1)."""
    group_per_minute: float = Field(default=20.0, gt=0)
    """Messages and edits in one group in any rolling minute (Telegram: 20); a sliding
    window, so no 60 seconds ever hold more."""
    overall_per_second: float = Field(default=30.0, gt=0)
    """Messages and edits per second for the whole bot (Telegram: about 30)."""
    relay_deadline: float = Field(default=60.0, ge=0)
    """Bridging: seconds a relayed copy of another endpoint's message waits through
    Telegram's flood control before it is reported failed (the next one then goes)."""

    @field_validator("listen_path")
    @classmethod
    def _check_path(cls, path: str) -> str:
        if not _PATH.fullmatch(path):
            raise ValueError("must be a URL path starting with / (e.g. /telegram/webhook)")
        return path

    def check_secrets(self) -> None:
        """The bot token (and in webhook mode the secret) are set and well formed."""
        self.bot_token()
        if self.mode == "webhook":
            self.secret()

    def bot_token(self) -> str:
        """The token from this table, else TELEGRAM_BOT_TOKEN; MissingToken if neither
        or if it is not shaped like @BotFather's (never sent to Telegram then)."""
        token = self._secret(self.token, ENV_TOKEN, "token")
        if not _BOT_TOKEN.fullmatch(token):
            raise MissingToken(
                f"{ENV_TOKEN} is not a bot token (digits, a colon and 35 characters of "
                "A-Z, a-z, 0-9, _ and -): copy the whole token @BotFather gave you"
            )
        return token

    def secret(self) -> str:
        """The webhook secret (1-256 of A-Z a-z 0-9 _ -); MissingToken if unset or bad."""
        secret = self._secret(self.webhook_secret, ENV_WEBHOOK_SECRET, "webhook_secret")
        if not _SECRET.fullmatch(secret):
            raise MissingToken(
                f"{ENV_WEBHOOK_SECRET} must be 1-256 characters of A-Z, a-z, 0-9, _ and -"
            )
        return secret

    def _secret(self, value: SecretStr | None, variable: str, key: str) -> str:
        text = value.get_secret_value() if value is not None else os.environ.get(variable, "")
        if not text.strip():
            raise MissingToken(
                f"{variable} is not set: export it (or set {key} in [plugins.telegram])"
            )
        return text.strip()
