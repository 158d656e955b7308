"""TelegramPlatform: the fake Bot API as a `FakePlatform` of ore's conduit conformance kit.

A kit conversation is a private chat of its own (a user of its own). In a private chat
the conduit streams into a draft, so every message of the bot is a finished answer.
Interrupting is `/stop`.
"""

from __future__ import annotations

import tempfile
import zlib
from pathlib import Path
from typing import Any

from ore_conduit_telegram.testing.fake import FakeMessage, FakeTelegram

__all__ = ["TelegramPlatform"]


class TelegramPlatform:
    """Drives `fake` as users would; see the module docstring."""

    def __init__(self, fake: FakeTelegram) -> None:
        self.fake = fake
        self._asked: dict[str, FakeMessage] = {}
        self._read: dict[str, int] = {}
        self._polls = 0
        self._state = tempfile.TemporaryDirectory(prefix="fake-telegram-")
        self.state_dir = Path(self._state.name)

    @classmethod
    async def start(cls) -> TelegramPlatform:
        """A started fake Bot API behind a platform."""
        return cls(await FakeTelegram().start())

    def settings(self, **extra: Any) -> dict[str, Any]:
        """The conduit's `[plugins.telegram]` table for this platform."""
        return self.fake.conduit_settings(str(self.state_dir), flush_interval=0.05, **extra)

    @staticmethod
    def chat_of(conversation: str) -> int:
        """The private chat of a kit conversation: the same in every run, so a link can
        name it before anyone wrote there (`endpoint_value`)."""
        return 5000 + zlib.crc32(conversation.encode()) % 1_000_000

    def chat(self, conversation: str) -> int:
        """The private chat of a kit conversation (known to the fake from then on)."""
        chat = self.chat_of(conversation)
        self.fake.chat(chat, "private")
        return chat

    async def wait_until_ready(self) -> None:
        """Until the conduit has polled (again) since the last call returned."""
        await self.fake.wait_until(lambda: self.fake.polls > self._polls)
        self._polls = self.fake.polls

    async def post_user_message(self, conversation: str, text: str, message_id: str) -> None:
        """A user writes; a repeated id hands the same update over again."""
        chat = self.chat(conversation)
        known = self._asked.get(message_id)
        if known is not None:
            await self.fake.hand_over_again(known)
            return
        self._asked[message_id] = await self.fake.user_says(chat, text, user=chat)

    async def wait_for_reply(self, conversation: str) -> str:
        """The next finished answer in the conversation's chat."""
        chat = self.chat(conversation)
        seen = self._read.get(conversation, 0)

        def answers() -> list[str]:
            return self.fake.bot_texts(chat)

        await self.fake.wait_until(lambda: len(answers()) > seen)
        self._read[conversation] = seen + 1
        return answers()[seen]

    async def interrupt(self, conversation: str) -> None:
        """`/stop` in the conversation's chat."""
        chat = self.chat(conversation)
        await self.fake.user_says(chat, "/stop", user=chat)

    async def close(self) -> None:
        """Stop the fake and remove the conduit's state."""
        await self.fake.close()
        self._state.cleanup()
