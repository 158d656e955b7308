"""Notes: the conduit's own replies (the greeting, "new conversation", a file notice).

Each is queued in the state by the update that asked for it and sent once Telegram has
it, marked sent after: a crash neither loses nor repeats one. `flush` sends what is
queued, in order; the inbound side awaits it, so a local reply comes before the
answers to later messages of its chat. Sends are paced like every other
(`ore_core.conduit.pacing`).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import structlog

from ore_conduit_telegram.shield import uninterrupted
from ore_conduit_telegram.state import State
from ore_core.conduit import PlatformError, metrics
from ore_core.conduit.copies import COPY_DEADLINE
from ore_core.conduit.pacing import Pacing

if TYPE_CHECKING:
    from ore_conduit_telegram.platform import TelegramPlatform

__all__ = ["Notes"]

log = structlog.get_logger("ore.conduit.telegram")

_CONDUIT = "telegram"  # the metrics label of replies sent without a renderer


class Notes:
    """Sends the queued local replies of `state` through `platform` (module docstring)."""

    def __init__(self, platform: TelegramPlatform, state: State) -> None:
        self.platform = platform
        self.state = state
        self.pacing = Pacing(_CONDUIT)
        self._lock = asyncio.Lock()

    async def flush(self) -> None:
        """Send every queued reply."""
        async with self._lock:
            for note_id, chat, topic, reply_to, text in await self.state.notes():
                await uninterrupted(self._send(note_id, chat, topic, reply_to, text))

    async def _send(self, note_id: str, chat: int, topic: int, reply_to: int, text: str) -> None:
        conversation = f"{chat}:{topic}:0"
        replied = f"{chat}:{reply_to}" if reply_to else ""

        async def send() -> str:
            return await self.platform.send(conversation, text, html=False, reply_to=replied)

        deadline = asyncio.get_running_loop().time() + COPY_DEADLINE
        try:
            await self.pacing.call(conversation, send, deadline=deadline)
            metrics.delivered(_CONDUIT)
        except PlatformError as exc:
            log.warning("local reply refused", chat=chat, error=exc.detail)
            metrics.delivery_failed(_CONDUIT)
        await self.state.note_sent(note_id)
