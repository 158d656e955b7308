"""Pacing a platform's calls: its rate limits per conversation, its outages until a deadline.

An adapter classifies each failure once (`Transient`, `RateLimited`, `Refused`); this
module is what the engine does with the class. A rate limit pauses the conversation it
names for exactly the wait the platform asked, and only that conversation: every call
for it waits out the pause, calls for other conversations go on. A transient failure is
tried again on the one schedule of `until_answered` until the caller's deadline. A
refusal is raised at once: it will not pass with time.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from ore_core.conduit.counters import metrics
from ore_core.conduit.platform import RateLimited, Transient
from ore_core.conduit.waiting import core_away, until_answered

__all__ = ["Pacing", "passes"]

_T = TypeVar("_T")


def passes(error: BaseException) -> bool:
    """Does `error` pass with time: the platform away (`Transient`) or the core away?"""
    return isinstance(error, Transient) or core_away(error)


class Pacing:
    """The rate-limit pauses of one conduit's conversations (see the module docstring).

    `name` is the conduit's (its counters); `on_limited(error)` is told of every rate
    limit before its wait (the copy engine reports `retrying` once from it).
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._until: dict[str, float] = {}  # conversation -> loop time its pause ends

    def paused(self, conversation: str) -> float:
        """Seconds the conversation is still paused for (0: not paused)."""
        loop = asyncio.get_running_loop()
        return max(0.0, self._until.get(conversation, 0.0) - loop.time())

    async def call(
        self,
        conversation: str,
        call: Callable[[], Awaitable[_T]],
        *,
        deadline: float,
        on_limited: Callable[[RateLimited], Awaitable[None]] | None = None,
    ) -> _T:
        """`call()` once the conversation's pause is over, again after each rate limit
        (waiting exactly its time) and each transient failure (the one backoff), until
        `deadline` (loop time): then the last failure is raised, as is a `Refused`."""

        async def paced() -> _T:
            while True:
                await asyncio.sleep(self.paused(conversation))
                try:
                    return await call()
                except RateLimited as limited:
                    metrics.rate_limited(self.name)
                    loop = asyncio.get_running_loop()
                    ends = loop.time() + limited.wait
                    self._until[conversation] = max(self._until.get(conversation, 0.0), ends)
                    if ends > deadline:
                        raise
                    if on_limited is not None:
                        await on_limited(limited)

        return await until_answered(
            paced,
            "the platform did not answer",
            passing=passes,
            deadline=deadline,
            conversation=conversation,
        )
