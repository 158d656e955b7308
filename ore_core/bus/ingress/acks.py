"""Acknowledging handled ingress messages: once their output is stored, in batches.

A handled message is acked only once its output is stored: first the egress sink must
have taken every event queued before it was handled (its `position`), then the
pipeline must have stored everything published up to then. While a JetStream limit
holds output back, that waits, so a worker dying meanwhile loses nothing.

An ack waits `ACK_LINGER` for another write to ride along with (the next turn's output,
other acks) before it is written alone: back to back turns of one conversation then
cost the core one socket write per turn instead of two, and under load the server gets
acks in larger writes. A worker that dies meanwhile only causes a redelivery, which
the thread's record answers with a `done` alone, as after any crash.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable

import structlog
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.errors import Error as NatsError

from ore_core._nats.wire import settle_now, wait_flushed, wake_flusher
from ore_core.bus.egress.egress import Egress
from ore_core.bus.egress.pipeline import Pipeline

__all__ = ["ACK_LINGER", "AckBatcher", "settle"]

log = structlog.get_logger("ore.bus")

ACK_LINGER = 0.01
_STOP_STORE_WAIT = 5.0  # seconds stop waits for handled messages' output to be stored

Handled = tuple[Msg, int, str]
"""A handled message, the egress sink position when it was handled, and its thread."""


async def settle(action: Callable[[], Awaitable[object]]) -> None:
    """Send an ack, nak or progress; a lost one only means a later redelivery."""
    try:
        await action()
    except NatsError as exc:
        log.debug("acknowledgement not sent", error=repr(exc))


class AckBatcher:
    """The handled messages of one Ingress waiting for their output to be stored."""

    def __init__(self, nc: NatsClient, egress: Egress, pipeline: Pipeline) -> None:
        self._nc = nc
        self._egress = egress
        self._pipeline = pipeline
        self._handled: deque[Handled] = deque()
        self._wakeup = asyncio.Event()
        self._wake: asyncio.TimerHandle | None = None

    def __bool__(self) -> bool:
        return bool(self._handled)

    def add(self, msg: Msg, position: int, thread_id: str) -> None:
        """`msg` of `thread_id` is handled; ack it once output up to `position` is stored
        (`wake` the loop after the last one of a batch)."""
        self._handled.append((msg, position, thread_id))

    def wake(self) -> None:
        """Let `run` look at what was added."""
        self._wakeup.set()

    def messages(self) -> list[Msg]:
        """The messages waiting (to keep them in progress)."""
        return [msg for msg, _, _ in self._handled]

    def take(self, which: Callable[[str, int], bool]) -> list[Handled]:
        """Remove and return the handled messages `which(thread_id, position)` picks."""
        taken = [entry for entry in self._handled if which(entry[2], entry[1])]
        if taken:
            kept = [entry for entry in self._handled if not which(entry[2], entry[1])]
            self._handled.clear()
            self._handled.extend(kept)
        return taken

    async def run(self) -> None:
        """The loop that acks what is handled once its output is stored (module doc)."""
        handled = self._handled
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            while handled:
                position = handled[-1][1]
                await self._egress.wait_emitted(position)
                await self._pipeline.wait_stored(self._pipeline.mark())
                over_limit = False
                while handled and handled[0][1] <= position:
                    over_limit |= self._ack_now(handled.popleft()[0])
                if over_limit:
                    await wait_flushed(self._nc)

    def _ack_now(self, msg: Msg) -> bool:
        """`settle(msg.ack)` without awaiting; True when the caller should `wait_flushed`."""
        if self._wake is None:
            self._wake = asyncio.get_running_loop().call_later(ACK_LINGER, self.write)
        try:
            return settle_now(self._nc, msg, wake=False)
        except NatsError as exc:
            log.debug("acknowledgement not sent", error=repr(exc))
            return False

    def write(self) -> None:
        """Write the acks that linger (`_ack_now`) with whatever else is pending."""
        if self._wake is not None:
            self._wake.cancel()
            self._wake = None
        wake_flusher(self._nc)

    async def flush(self) -> None:
        """Let the loop send what is handled (its output stored), then flush."""
        try:
            async with asyncio.timeout(_STOP_STORE_WAIT):
                while self._handled:  # noqa: ASYNC110 (the loop empties it)
                    await asyncio.sleep(0.05)
        except TimeoutError:
            pass
        try:
            await self._nc.flush(timeout=2)
        except (NatsError, TimeoutError) as exc:
            log.debug("acks not flushed", error=repr(exc))

    async def settle_all(self) -> None:
        """At stop (the sinks have drained): ack what is stored, hand back the rest."""
        if not self._handled:
            return
        mark = self._pipeline.mark()
        try:
            async with asyncio.timeout(_STOP_STORE_WAIT):
                await self._pipeline.wait_stored(mark)
        except TimeoutError:
            pass
        stored = self._pipeline.stored_before(mark)
        handled = [msg for msg, _, _ in self._handled]
        self._handled.clear()
        for msg in handled:
            await settle(msg.ack if stored else msg.nak)
        if not stored:
            log.warning(
                "output not stored at stop; handled messages handed back", count=len(handled)
            )
