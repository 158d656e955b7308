"""What an Ingress has submitted to streams and not yet seen handled, by thread.

Each thread's deliveries are kept in submission order under their ack subject (unique
per message); `forget_if_empty` drops a thread once nothing of it is in flight and
wakes whoever waits for a partition or the whole worker to be idle.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass

from nats.aio.msg import Msg

from ore_core._nats.codec import stream_sequence
from ore_core.session.stream import Stream
from ore_core.subjects import partition_of
from ore_core.tasks import Idle

__all__ = ["Delivery", "InFlight"]


@dataclass(slots=True, eq=False)
class Delivery:
    """A message submitted to a stream and not yet acknowledged."""

    msg: Msg
    thread_id: str
    stream: Stream
    interrupt: bool

    @property
    def sequence(self) -> int:
        """The message's stream sequence, read when it is parked (not for every message)."""
        return stream_sequence(self.msg)


class InFlight:
    """The deliveries of one Ingress, by thread id then ack subject (`msg.reply`)."""

    def __init__(self, partitions: int) -> None:
        self._partitions = partitions
        self.threads: dict[str, dict[str, Delivery]] = {}
        self._handled_one = asyncio.Event()  # set whenever a thread has nothing in flight
        self._idle = Idle()

    def __len__(self) -> int:
        return sum(len(entries) for entries in self.threads.values())

    def __iter__(self) -> Iterator[Delivery]:
        """Every delivery (a copy: the caller may change what is in flight meanwhile)."""
        return iter([d for entries in list(self.threads.values()) for d in entries.values()])

    def add(self, delivery: Delivery) -> dict[str, Delivery]:
        """Keep `delivery`; its thread's entries."""
        entries = self.threads.get(delivery.thread_id)
        if entries is None:
            entries = self.threads[delivery.thread_id] = {}
        entries[delivery.msg.reply] = delivery
        return entries

    def of_partition(self, partition: int) -> list[str]:
        """The threads of `partition` with something in flight."""
        count = self._partitions
        return [t for t in self.threads if partition_of(t, count) == partition]

    def pop_thread(self, thread_id: str) -> list[Delivery]:
        """Forget the thread's deliveries and return them."""
        entries = self.threads.pop(thread_id, None)
        self.forget_if_empty(thread_id)
        return list(entries.values()) if entries else []

    def pop_all(self) -> list[Delivery]:
        """Forget every delivery and return them."""
        taken = list(self)
        self.threads.clear()
        return taken

    def forget_if_empty(self, thread_id: str) -> None:
        """Drop the thread's entry when nothing of it is in flight; wake the waiters."""
        if self.threads.get(thread_id):
            return
        self.threads.pop(thread_id, None)
        self._handled_one.set()
        if not self.threads:
            self._idle.set()

    async def wait_partition(self, partition: int) -> None:
        """Return once nothing of `partition` is in flight (bound it with a timeout)."""
        while self.of_partition(partition):
            await self._handled_one.wait()
            self._handled_one.clear()

    async def wait_idle(self) -> None:
        """Return once nothing is in flight (bound it with a timeout)."""
        if self.threads:
            await self._idle.wait()
