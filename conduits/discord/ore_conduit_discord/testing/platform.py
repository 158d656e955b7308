"""DiscordKitPlatform: the fake Discord as a `FakePlatform` of ore's conduit conformance
kit. A kit conversation is a text channel of its own in the fake guild; interrupting is
the `/stop` slash command. Replies are the bot's messages in the channel, in order."""

from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path
from typing import Any

from ore_conduit_discord.platform import conversation_of
from ore_conduit_discord.testing.fake import GUILD, FakeDiscord

__all__ = ["DiscordKitPlatform"]


class DiscordKitPlatform:
    """Drives `fake` as users would; see the module docstring."""

    def __init__(self, fake: FakeDiscord) -> None:
        self.fake = fake
        self._channels: dict[str, str] = {}
        self._asked: dict[str, tuple[str, str]] = {}  # kit message id -> channel, message
        self._read: dict[str, int] = {}
        self._readied = 0
        self._state = tempfile.TemporaryDirectory(prefix="fake-discord-")
        self.state_dir = Path(self._state.name)

    @classmethod
    async def start(cls) -> DiscordKitPlatform:
        return cls(await FakeDiscord().__aenter__())

    def settings(self, **extra: Any) -> dict[str, Any]:
        """The conduit's `[plugins.discord]` table for this platform."""
        return {
            "token": self.fake.token,
            "api_url": f"{self.fake.url}/api/v10",
            "state_dir": str(self.state_dir),
            "identify_delay": 0,
        } | extra

    @staticmethod
    def channel_id(conversation: str) -> str:
        """The id of the kit conversation's channel: known before the channel is made,
        so a test can link it (a snowflake-like number from the name)."""
        digest = hashlib.sha256(conversation.encode()).hexdigest()
        return str(9 * 10**17 + int(digest[:12], 16))

    @classmethod
    def endpoint(cls, conversation: str) -> str:
        """The conduit's conversation key's value (a link's endpoint) for `conversation`."""
        return conversation_of(GUILD, cls.channel_id(conversation))

    def channel(self, conversation: str) -> str:
        if conversation not in self._channels:
            made = self.fake.add_channel(channel=self.channel_id(conversation))
            self._channels[conversation] = made
        return self._channels[conversation]

    async def wait_until_ready(self) -> None:
        """Until the conduit's gateway session is (again) ready since the last call."""
        await self.fake.wait_until(lambda: self.fake.gateway.readied > self._readied)
        self._readied = self.fake.gateway.readied

    async def post_user_message(self, conversation: str, text: str, message_id: str) -> None:
        """A user writes; a repeated id dispatches the same message again."""
        known = self._asked.get(message_id)
        if known is not None:
            await self.fake.hand_over_again(*known)
            return
        channel = self.channel(conversation)
        self._asked[message_id] = (channel, await self.fake.user_says(channel, text))

    async def wait_for_reply(self, conversation: str) -> str:
        """The next message of the bot in the conversation's channel."""
        channel = self.channel(conversation)
        seen = self._read.get(conversation, 0)
        await self.fake.wait_until(lambda: len(self.fake.bot_texts(channel)) > seen)
        self._read[conversation] = seen + 1
        return self.fake.bot_texts(channel)[seen]

    async def interrupt(self, conversation: str) -> None:
        await self.fake.user_command(self.channel(conversation), "stop")

    async def close(self) -> None:
        await self.fake.__aexit__(None, None, None)
        self._state.cleanup()
