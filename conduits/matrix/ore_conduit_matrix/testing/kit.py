"""MatrixKit: the fake homeserver as a `FakePlatform` of ore's conduit conformance kit.

A kit conversation is a room of its own (Alice and the bot), `!<conversation>:fake.local`
(`room_id`: a gateway of the bridging kit names it before it exists). A repeated message id is
the same event handed over again. Interrupting is `!stop`.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from ore_conduit_matrix.testing.fake import SERVER, FakeMatrix

__all__ = ["MatrixKit"]


class MatrixKit:
    """Drives `fake` as users would; see the module docstring."""

    def __init__(self, fake: FakeMatrix) -> None:
        self.fake = fake
        self._rooms: dict[str, str] = {}
        self._asked: dict[str, str] = {}  # kit message id -> event id
        self._read: dict[str, int] = {}
        self._state = tempfile.TemporaryDirectory(prefix="fake-matrix-")
        self.state_dir = Path(self._state.name)

    @classmethod
    async def start(cls) -> MatrixKit:
        return cls(await FakeMatrix().start())

    def settings(self, **extra: Any) -> dict[str, Any]:
        """The conduit's `[plugins.matrix]` table for this platform."""
        return self.fake.conduit_settings(str(self.state_dir), **extra)

    @staticmethod
    def room_id(conversation: str) -> str:
        return f"!{conversation}:{SERVER}"

    async def room(self, conversation: str) -> str:
        if conversation not in self._rooms:
            self._rooms[conversation] = await self.fake.create_room(name=conversation)
        return self._rooms[conversation]

    async def wait_until_ready(self) -> None:
        """Until a sync of the conduit waits for news."""
        await self.fake.wait_until(lambda: self.fake.waiting > 0)

    async def post_user_message(self, conversation: str, text: str, message_id: str) -> None:
        room = await self.room(conversation)
        known = self._asked.get(message_id)
        if known is not None:
            await self.fake.replay(known)
            return
        self._asked[message_id] = await self.fake.user_says(room, text)

    async def wait_for_reply(self, conversation: str) -> str:
        """The next message of the bot in the conversation's room (as shown now)."""
        room = await self.room(conversation)
        seen = self._read.get(conversation, 0)
        await self.fake.wait_until(lambda: len(self.fake.bot_texts(room)) > seen)
        self._read[conversation] = seen + 1
        return self.fake.bot_texts(room)[seen]

    async def interrupt(self, conversation: str) -> None:
        await self.fake.user_says(await self.room(conversation), "!stop")

    async def close(self) -> None:
        await self.fake.close()
        self._state.cleanup()
