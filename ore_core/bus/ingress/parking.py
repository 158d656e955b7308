"""Parking: ingress messages of a thread that wait here, in order, to be handled again.

When the store refuses a stale copy (`StaleThread`) or cannot save (disk full,
read-only, locked), the stream hands the message back and the thread is *parked*: its
handed-back messages, and every newer one that arrives meanwhile, wait here
unacknowledged (the Ingress keeps them in progress) and are admitted again in stream
order: at once for a stale copy (the thread is reloaded), after a backoff for an
unavailable store (`retry_delay` doubling up to `retry_delay_max`), after a random,
growing delay when two workers keep racing on one thread. A message of a partition
whose lease is only overdue (a pause) is *held* the same way until the lease is renewed
(then admitted) or lost (then handed back). Why not NAK with a delay: the server applies
the consumer's BackOff on top of a NAK's delay from the second redelivery on, and
redeliveries of one thread's messages come back in any order.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from nats.aio.msg import Msg

from ore_core.bus.egress.egress import EventsNotRead
from ore_core.bus.ingress.acks import settle
from ore_core.bus.server.streams import BusConfig
from ore_core.errors import OreError, StaleThread
from ore_core.session.store_health import is_store_failure
from ore_core.subjects import partition_of
from ore_core.tasks import TaskScope

__all__ = ["Parked", "Parking"]

_RACE_BACKOFF = 0.1  # seconds: the first ceiling of the random delay after repeated races
_OWNED_CHECK = 0.1  # seconds between looks whether an overdue lease is usable again

Admit = Callable[[Msg, str, int], Awaitable[None] | None]
"""`admit(msg, thread_id, partition)`: the Ingress's one way to handle a message."""


@dataclass(slots=True, eq=False)
class Parked:
    """A thread's messages waiting to be handled again, by stream sequence."""

    messages: dict[int, Msg] = field(default_factory=dict)
    timer: asyncio.TimerHandle | None = None
    resuming: bool = False


class Parking:
    """The parked threads of one Ingress and their retries (jobs of `retries`)."""

    def __init__(
        self,
        config: BusConfig,
        *,
        admit: Admit,
        owns: Callable[[int], bool],
        pulled: Callable[[int], bool],
        stopping: Callable[[], bool],
        retries: TaskScope,
    ) -> None:
        self._config = config
        self._admit = admit
        self._owns = owns
        self._pulled = pulled  # pulled here and not stopping: an overdue lease may return
        self._stopping = stopping
        self._retries = retries
        self.threads: dict[str, Parked] = {}
        self._failures: dict[str, int] = {}  # store failures in a row per thread: backoff
        self.counts: dict[str, int] = {}
        """Messages parked so far, by why: `store` failure, `stale` copy, `other` (metrics)."""

    def waits(self, msg: Msg, thread_id: str, sequence: int) -> bool:
        """True (and `msg` parked) when older messages of its thread wait here."""
        parked = self.threads.get(thread_id)
        if parked is None:
            return False
        parked.messages[sequence] = msg
        return True

    def waits_unless_resuming(self, msg: Msg, thread_id: str, sequence: int) -> bool:
        """`waits`, but not for a message the thread's own retry is admitting."""
        parked = self.threads.get(thread_id)
        if parked is None or parked.resuming:
            return False
        parked.messages[sequence] = msg
        return True

    def saved(self, thread_id: str) -> None:
        """A message of `thread_id` was saved: its backoff starts over."""
        if self._failures:
            self._failures.pop(thread_id, None)

    def stop_retry(self, thread_id: str) -> Parked:
        """The thread's parking (made if none), its retry stopped: the caller refills it."""
        parked = self.threads.get(thread_id)
        if parked is None:
            parked = self.threads[thread_id] = Parked()
        parked.resuming = False  # a retry running now stops after its current message
        if parked.timer is not None:
            parked.timer.cancel()
            parked.timer = None
        return parked

    def park(self, msg: Msg, thread_id: str, sequence: int, error: OreError) -> None:
        """Hold `msg` (and its thread's newer messages) and try again after a delay:
        none for a stale copy or a closed stream, a backoff for a store failure (or
        events that could not be read)."""
        parked = self.threads.get(thread_id)
        if parked is None:
            parked = self.threads[thread_id] = Parked()
        parked.messages[sequence] = msg
        delay = 0.0
        config = self._config
        why = "stale" if isinstance(error, StaleThread) else "other"
        if is_store_failure(error) or isinstance(error, EventsNotRead):
            why = "store"
            failures = self._failures[thread_id] = self._failures.get(thread_id, 0) + 1
            delay = min(config.retry_delay * 2 ** (failures - 1), config.retry_delay_max)
        elif isinstance(error, StaleThread):
            # Lost a race with another writer of the thread: retry at once the first
            # time; if it keeps happening (two workers busy on one thread), back off by
            # a random, growing delay so one of them can finish its turn.
            races = self._failures[thread_id] = self._failures.get(thread_id, 0) + 1
            if races > 1:
                ceiling = min(_RACE_BACKOFF * 2 ** (races - 2), config.retry_delay_max)
                delay = random.uniform(0, ceiling)
        self.counts[why] = self.counts.get(why, 0) + 1
        parked.resuming = False
        if parked.timer is not None:
            parked.timer.cancel()
        parked.timer = asyncio.get_running_loop().call_later(delay, self._resume, thread_id)

    def hold(self, msg: Msg, thread_id: str, sequence: int) -> None:
        """Park `msg` until its partition's lease is usable again (see `_readmit`)."""
        parked = self.threads.get(thread_id)
        if parked is None:
            parked = self.threads[thread_id] = Parked()
        parked.messages[sequence] = msg
        if parked.timer is None and not parked.resuming:
            loop = asyncio.get_running_loop()
            parked.timer = loop.call_later(_OWNED_CHECK, self._resume, thread_id)

    def take(self, which: Callable[[str], bool]) -> list[Msg]:
        """Unpark the threads `which(thread_id)` picks; their messages, to hand back."""
        taken: list[Msg] = []
        for thread_id in [t for t in self.threads if which(t)]:
            parked = self.threads.pop(thread_id)
            if parked.timer is not None:
                parked.timer.cancel()
            parked.resuming = False
            taken.extend(parked.messages.values())
        return taken

    def messages(self) -> list[Msg]:
        """Every message waiting here (to keep them in progress)."""
        return [msg for parked in self.threads.values() for msg in parked.messages.values()]

    def _resume(self, thread_id: str) -> None:
        parked = self.threads.get(thread_id)
        if parked is None or self._stopping():
            return
        parked.timer = None
        parked.resuming = True
        # A job, not a loop: a bug in one thread's retry is logged and stops nothing else.
        self._retries.spawn(
            self._readmit(thread_id, parked), name=f"ore-ingress-retry-{thread_id}", critical=False
        )

    async def _readmit(self, thread_id: str, parked: Parked) -> None:
        """Admit the parked messages oldest first, until one is parked again.

        While the thread's partition lease is overdue they wait on; once the partition
        is no longer pulled here, they are handed back.
        """
        partition = partition_of(thread_id, self._config.partition_count)
        while parked.resuming and parked.messages:
            if not self._owns(partition):
                parked.resuming = False
                if self._pulled(partition):
                    loop = asyncio.get_running_loop()
                    parked.timer = loop.call_later(_OWNED_CHECK, self._resume, thread_id)
                    return
                if self.threads.get(thread_id) is parked:
                    del self.threads[thread_id]
                for msg in parked.messages.values():
                    await settle(msg.nak)
                return
            sequence = min(parked.messages)
            pending = self._admit(parked.messages.pop(sequence), thread_id, partition)
            if pending is not None:
                await pending
        if parked.resuming and self.threads.get(thread_id) is parked:
            del self.threads[thread_id]  # all admitted: the thread flows again
