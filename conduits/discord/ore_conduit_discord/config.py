"""DiscordConfig: the `[plugins.discord]` table of ore.toml.

```toml
[plugins.discord]
# The bot token is best left to the environment: DISCORD_BOT_TOKEN
# (or ORE_PLUGINS__DISCORD__TOKEN).
[plugins.discord.webhooks]
# channel id = the URL of a webhook of that channel: relayed copies show their sender
"1300000000000000001" = "https://discord.com/api/webhooks/1400.../abc..."
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

__all__ = ["ENV_TOKEN", "DiscordConfig", "MissingToken", "Webhook"]

ENV_TOKEN = "DISCORD_BOT_TOKEN"

_BOT_TOKEN = re.compile(r"[A-Za-z0-9_-]{18,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{20,}")
"""The shape of a bot token from the developer portal: three parts joined by dots."""
_WEBHOOK = re.compile(
    r"(?P<base>https?://.+?)/api(?:/v\d+)?/webhooks/(?P<id>\d+)/(?P<token>[\w-]+)"
)


def default_state_dir() -> Path:
    """`discord` in ore's user state directory (`~/.local/state/ore/discord` on Linux)."""
    return Path(platformdirs.user_state_dir("ore")) / "discord"


class MissingToken(OreError):
    """The bot token is missing, malformed or refused; the message says which."""


class Webhook:
    """A channel webhook parsed from its URL: its id and token."""

    def __init__(self, url: str) -> None:
        match = _WEBHOOK.fullmatch(url)
        if match is None:
            raise ValueError(f"{url!r} is not a webhook URL (…/api/webhooks/ID/TOKEN)")
        self.id = match["id"]
        self.token = match["token"]


class DiscordConfig(ConduitConfig):
    """How the Discord conduit connects and where relayed copies go."""

    token: SecretStr | None = None
    """The bot token (developer portal, Bot, Reset Token); default: DISCORD_BOT_TOKEN."""
    api_url: str = "https://discord.com/api/v10"
    """Base URL of the REST API (a fake in tests); the gateway's URL is asked of it."""
    webhooks: dict[str, str] = Field(default_factory=dict)
    """Channel id -> the URL of a webhook of that channel. Relayed copies in that channel
    (and its threads) go through it, showing the sender's name and avatar; elsewhere
    they are posted by the bot with the sender's name as a label."""
    allow_bots: tuple[str, ...] = ()
    """Ids of other bots whose messages are passed on; every other bot is ignored."""
    message_content: bool = True
    """Ask for the privileged Message Content intent (needed to read messages that do not
    mention the bot; switch it on in the developer portal, see the README)."""
    durable: DurableName = "discord"
    """The durable consumer keeping the conduit's place in ore's output across restarts."""
    state_dir: StateDir = Field(default_factory=default_state_dir)
    """Where the conduit keeps its gateway session (`session-<durable>.json`), so a
    restart resumes it and gets the events it missed. One directory per bot."""
    identify_delay: float = Field(default=2.0, ge=0)
    """Seconds to wait before identifying again after Discord ended the session."""

    @field_validator("webhooks")
    @classmethod
    def _check_webhooks(cls, webhooks: dict[str, str]) -> dict[str, str]:
        for channel, url in webhooks.items():
            if not channel.isdigit():
                raise ValueError(f"{channel!r} is not a channel id (digits)")
            Webhook(url)
        return webhooks

    def webhook(self, channel: str) -> Webhook | None:
        url = self.webhooks.get(channel)
        return Webhook(url) if url else None

    def check_secrets(self) -> None:
        """The bot token is set and shaped like one."""
        self.bot_token()

    def bot_token(self) -> str:
        """The token from this table, else DISCORD_BOT_TOKEN; MissingToken if neither or
        if it is not shaped like a bot token (never sent to Discord then)."""
        value = (
            self.token.get_secret_value()
            if self.token is not None
            else os.environ.get(ENV_TOKEN, "")
        )
        token = value.strip().removeprefix("Bot ")
        if not token:
            raise MissingToken(
                f"{ENV_TOKEN} is not set: export it (or set token in [plugins.discord])"
            )
        if not _BOT_TOKEN.fullmatch(token):
            raise MissingToken(
                f"{ENV_TOKEN} is not a bot token (three parts joined by dots): copy it from "
                "the developer portal's Bot page (Reset Token), not the application's id or secret"
            )
        return token
