"""ThreadLanes: a feed's deliveries rendered per thread, in order, threads concurrently.

A conduit shows each thread's events in order (an answer's end after its start, an edit
after the message it edits), but one slow thread (a platform pausing one chat for a
rate limit) must not hold up the others. `ThreadLanes.run(feed)` reads the feed and
hands each delivery to its thread's lane: a task of its own that handles the thread's
deliveries one at a time, in the feed's order, while the lanes of other threads run at
the same time. Each delivery is held (`EventFeed.hold`) until its lane finished it, so
a durable feed's cursor never passes an event that a process killed meanwhile had not
rendered: it is delivered again after a restart.

A lane with nothing to do for `idle` seconds ends, unless `Lane.busy()` (an answer
still open): the next delivery of its thread starts a new one. At most `max_pending`
deliveries wait in lanes at once; past that the reader waits for a lane to finish one,
so memory stays bounded while a platform is slow (the rest waits in the core, whose
durable feed delivers it when asked).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Literal, Protocol

import structlog

from ore_core.conduit.feed import Delivery
from ore_core.errors import OreError

__all__ = ["Held", "HeldFeed", "Lane", "ThreadLanes"]

log = structlog.get_logger("ore.conduit.lanes")

IDLE = 30.0
"""Seconds a lane with nothing to do (and not busy) waits before it ends."""
MAX_PENDING = 10_000
"""Deliveries waiting in lanes at most, across threads, before the reader waits."""


class Lane(Protocol):
    """How a conduit renders one thread (one object per lane, made by the factory).

    The methods run in the lane's task, one at a time. An error raised by `handle` or
    `tick` is logged and the lane goes on with the next delivery (one bad event must not
    stop a thread, nor the others); an error raised by `open` ends the lane and fails
    `ThreadLanes.run` (the conduit cannot render that thread at all).
    """

    async def open(self) -> None:
        """Before the first delivery: find the thread's place on the platform."""

    async def handle(self, delivery: Delivery) -> None:
        """Render one delivery of the thread."""

    def due(self) -> float | None:
        """Seconds until `tick` is due (a flush of streamed text, a typing action);
        None: nothing is pending."""

    async def tick(self) -> None:
        """Timed work: called when `due` has passed, and after the lane's queue empties."""

    def busy(self) -> bool:
        """Is something unfinished (an answer being written)? A busy lane never ends idle."""


class Held(Protocol):
    """A hold on a delivery (`Hold`): the feed's cursor stays before it until released."""

    def release(self) -> None: ...


class HeldFeed(Protocol):
    """What `ThreadLanes` reads: an `EventFeed` (its deliveries, and holds on them)."""

    def __aiter__(self) -> AsyncIterator[Delivery]: ...

    def hold(self, delivery: Delivery) -> Held: ...


class _Queue:
    """One thread's lane: its deliveries waiting, and whether its task has ended."""

    __slots__ = ("ended", "items")

    def __init__(self) -> None:
        self.items: asyncio.Queue[tuple[Delivery, Held] | None] = asyncio.Queue()  # None: end
        self.ended = False


class ThreadLanes:
    """Runs one lane per thread over a feed (see the module docstring).

    `lane(thread_id)` makes the `Lane` of a thread when its first delivery comes (again
    after an idle lane ended). `name` prefixes the lanes' task names and log lines.
    """

    def __init__(
        self,
        lane: Callable[[str], Lane],
        *,
        name: str = "lanes",
        idle: float = IDLE,
        max_pending: int = MAX_PENDING,
    ) -> None:
        if max_pending < 1:
            raise ValueError(f"max_pending must be at least 1, not {max_pending}")
        self._make = lane
        self.name = name
        self.idle = idle
        self.max_pending = max_pending
        self._lanes: dict[str, _Queue] = {}
        self._pending = 0
        self._room = asyncio.Event()
        self._room.set()

    @property
    def pending(self) -> int:
        """Deliveries handed to lanes and not finished yet."""
        return self._pending

    async def run(self, feed: HeldFeed) -> None:
        """Hand every delivery of `feed` to its thread's lane until the feed ends (or
        this is cancelled, which cancels the lanes); then wait for the lanes to finish
        what they were handed."""
        deliveries = aiter(feed)
        async with asyncio.TaskGroup() as tasks:
            while True:
                while self._pending >= self.max_pending:  # room first: then read the next
                    self._room.clear()
                    await self._room.wait()
                try:
                    delivery = await anext(deliveries)
                except StopAsyncIteration:
                    break
                queue = self._lanes.get(delivery.thread_id)
                if queue is None or queue.ended:
                    queue = self._lanes[delivery.thread_id] = _Queue()
                    lane = self._make(delivery.thread_id)
                    tasks.create_task(
                        self._run_lane(delivery.thread_id, lane, queue),
                        name=f"{self.name}-{delivery.thread_id}",
                    )
                self._pending += 1
                queue.items.put_nowait((delivery, feed.hold(delivery)))
            for queue in self._lanes.values():
                queue.items.put_nowait(None)

    async def _run_lane(self, thread_id: str, lane: Lane, queue: _Queue) -> None:
        """Handle the thread's deliveries in order until idle (see the module docstring)."""
        try:
            await lane.open()
            while True:
                item = await self._next(thread_id, lane, queue)
                if item is None:
                    if queue.items.empty() and not lane.busy():
                        return
                    continue
                if item == "end":
                    return  # the feed ended: nothing more will come
                delivery, hold = item
                await self._safely(thread_id, lane.handle(delivery))
                hold.release()
                self._finished_one()
                if queue.items.empty():
                    await self._safely(thread_id, lane.tick())
        finally:
            queue.ended = True
            if self._lanes.get(thread_id) is queue:
                del self._lanes[thread_id]

    async def _next(
        self, thread_id: str, lane: Lane, queue: _Queue
    ) -> tuple[Delivery, Held] | Literal["end"] | None:
        """The next delivery ("end" once the feed ended); None when `tick` was due (and
        done) or after `idle`."""
        if queue.items.empty():
            due = lane.due()
            timeout = self.idle if due is None else max(due, 0.0)
            try:
                # `asyncio.timeout`, not `wait_for`: on Python 3.11 `wait_for` can swallow
                # a cancellation that lands as the item arrives, and a conduit being
                # stopped would go on rendering (seen once in CI: not stopped in 10 s).
                async with asyncio.timeout(timeout):
                    item = await queue.items.get()
            except TimeoutError:
                if due is not None:
                    await self._safely(thread_id, lane.tick())
                return None
        else:
            item = queue.items.get_nowait()
        return "end" if item is None else item

    def _finished_one(self) -> None:
        self._pending -= 1
        if self._pending < self.max_pending:
            self._room.set()

    async def _safely(self, thread_id: str, step: Awaitable[None]) -> None:
        try:
            await step
        except OreError as exc:
            log.error("rendering failed", lanes=self.name, thread_id=thread_id, error=str(exc))
        except Exception:  # a bug rendering one event must not stop the other threads
            log.exception("rendering failed", lanes=self.name, thread_id=thread_id)
