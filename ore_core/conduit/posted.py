"""Posted: what this process posted, so "which turn is platform message X?" is answered here.

A reaction on the bot's answer, or a `/retry` in reply to a relayed copy, names a
platform message; the core's delivery map knows a copy once the conduit has reported
it (a moment after the post) and knows no answer at all. The engine notes every part
it posts, answer or copy, the moment the platform returns its id, so a question about
it is answered without asking the core, and never too early: an answer's turn id is
known only once the core stored the turn, so a question about one of its parts waits
for that (an event already on its way), and falls back to the core's map after
`SETTLE_WAIT` or once the answer ended without a stored turn.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict

from ore_core.conduit.client import ConduitClient

__all__ = ["SETTLE_WAIT", "Posted", "TurnOf"]

REMEMBERED = 20_000
"""Platform ids remembered (the oldest are forgotten: the core's map still knows copies)."""

SETTLE_WAIT = 10.0
"""Seconds a question about an answer's part waits for its stored turn at most: a core
that died mid-answer may never store it."""

TurnOf = asyncio.Future[str]
"""The turn id a posted part shows, once known ("" for none: ask the core)."""


class Posted:
    """Platform id -> (thread, turn) of what this process posted (module docstring)."""

    def __init__(self, client: ConduitClient, *, remembered: int = REMEMBERED) -> None:
        self.client = client
        self.remembered = remembered
        self._turns: OrderedDict[str, tuple[str, TurnOf]] = OrderedDict()

    @staticmethod
    def turn(turn_id: str = "") -> TurnOf:
        """A turn to note parts under: known now (`turn_id`), or set once it is."""
        future: TurnOf = asyncio.get_running_loop().create_future()
        if turn_id:
            future.set_result(turn_id)
        return future

    def add(self, platform_id: str, thread_id: str, turn: TurnOf) -> None:
        """Note that `platform_id`, posted now, shows `turn` of `thread_id`."""
        self._turns[platform_id] = (thread_id, turn)
        self._turns.move_to_end(platform_id)
        while len(self._turns) > self.remembered:
            self._turns.popitem(last=False)

    async def lookup(self, platform_id: str) -> tuple[str, str] | None:
        """(thread, turn) of `platform_id`: posted here, else reported to the core (None:
        neither knows it)."""
        noted = self._turns.get(platform_id)
        if noted is not None:
            thread_id, turn = noted
            try:
                turn_id = await asyncio.wait_for(asyncio.shield(turn), SETTLE_WAIT)
            except TimeoutError:
                turn_id = ""
            if turn_id:
                return thread_id, turn_id
        return await self.client.delivery_lookup(platform_id)
