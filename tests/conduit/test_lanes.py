"""ThreadLanes: per-thread ordered lanes over a feed, with holds (ore_core.conduit.lanes).

The feed here is a list the test feeds by hand (the lanes read any feed with `hold`),
so each test decides exactly when a delivery becomes available and when a lane's work
may finish; no timing is involved.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import pytest

from ore_core.conduit import Delivery, ThreadLanes

TIMEOUT = 10.0


@dataclass
class Held:
    sequence: int
    released: list[int]

    def release(self) -> None:
        self.released.append(self.sequence)


@dataclass
class HandFeed:
    """Deliveries as the test puts them; records what was taken, held and released."""

    queue: asyncio.Queue[Delivery | None] = field(default_factory=asyncio.Queue)
    taken: int = 0
    released: list[int] = field(default_factory=list)

    def put(self, thread: str, sequence: int) -> None:
        value = {"kind": "notice", "content": f"{thread} {sequence}", "severity": "Info"}
        self.queue.put_nowait(Delivery.of_value(thread, "notice", value, sequence))

    def end(self) -> None:
        self.queue.put_nowait(None)

    async def _deliveries(self) -> AsyncIterator[Delivery]:
        while (delivery := await self.queue.get()) is not None:
            self.taken += 1
            yield delivery

    def __aiter__(self) -> AsyncIterator[Delivery]:
        return self._deliveries()

    def hold(self, delivery: Delivery) -> Held:
        assert delivery.sequence is not None
        return Held(delivery.sequence, self.released)


@dataclass
class Recorder:
    """The lanes' work, shared by every lane: what each thread handled, in order."""

    handled: dict[str, list[int]] = field(default_factory=dict)
    opened: list[str] = field(default_factory=list)
    gates: dict[tuple[str, int], asyncio.Event] = field(default_factory=dict)
    failing: set[tuple[str, int]] = field(default_factory=set)
    busy: bool = False
    ticks: int = 0
    due: list[float] = field(default_factory=list)  # what `due` answers next (then None)
    changed: asyncio.Condition = field(default_factory=asyncio.Condition)

    def gate(self, thread: str, sequence: int) -> asyncio.Event:
        """Handling this delivery waits until the event is set."""
        gate = self.gates[(thread, sequence)] = asyncio.Event()
        return gate

    async def until(self, predicate: Callable[[], bool]) -> None:
        async with asyncio.timeout(TIMEOUT), self.changed:
            await self.changed.wait_for(predicate)

    async def notify(self) -> None:
        async with self.changed:
            self.changed.notify_all()


class RecordingLane:
    def __init__(self, recorder: Recorder, thread: str) -> None:
        self.recorder = recorder
        self.thread = thread

    async def open(self) -> None:
        self.recorder.opened.append(self.thread)

    async def handle(self, delivery: Delivery) -> None:
        sequence = delivery.sequence
        assert sequence is not None
        gate = self.recorder.gates.get((self.thread, sequence))
        if gate is not None:
            await gate.wait()
        if (self.thread, sequence) in self.recorder.failing:
            raise RuntimeError("a bug rendering one event")
        self.recorder.handled.setdefault(self.thread, []).append(sequence)
        await self.recorder.notify()

    def due(self) -> float | None:
        return self.recorder.due.pop(0) if self.recorder.due else None

    async def tick(self) -> None:
        self.recorder.ticks += 1
        await self.recorder.notify()

    def busy(self) -> bool:
        return self.recorder.busy


def lanes_of(recorder: Recorder, *, idle: float = 30.0, max_pending: int = 100) -> ThreadLanes:
    def lane(thread: str) -> RecordingLane:
        return RecordingLane(recorder, thread)

    return ThreadLanes(lane, name="test", idle=idle, max_pending=max_pending)


async def let_tasks_run(turns: int = 50) -> None:
    """Give every ready task `turns` turns of the event loop (work counted, not time)."""
    for _ in range(turns):
        await asyncio.sleep(0)


async def run(lanes: ThreadLanes, feed: HandFeed) -> asyncio.Task[None]:
    return asyncio.create_task(lanes.run(feed))


async def test_a_thread_s_deliveries_are_handled_in_the_feed_s_order() -> None:
    recorder, feed = Recorder(), HandFeed()
    for sequence in range(1, 21):
        feed.put("a" if sequence % 3 else "b", sequence)
    feed.end()
    await lanes_of(recorder).run(feed)
    assert recorder.handled["a"] == [s for s in range(1, 21) if s % 3]
    assert recorder.handled["b"] == [3, 6, 9, 12, 15, 18]


async def test_a_thread_that_waits_does_not_hold_up_another() -> None:
    recorder, feed = Recorder(), HandFeed()
    gate = recorder.gate("slow", 1)
    feed.put("slow", 1)
    feed.put("slow", 2)
    feed.put("fast", 3)
    feed.put("fast", 4)
    task = await run(lanes_of(recorder), feed)
    await recorder.until(lambda: recorder.handled.get("fast") == [3, 4])
    assert "slow" not in recorder.handled
    gate.set()
    feed.end()
    await task
    assert recorder.handled["slow"] == [1, 2]


async def test_a_delivery_is_released_only_once_its_lane_finished_it() -> None:
    recorder, feed = Recorder(), HandFeed()
    gate = recorder.gate("slow", 1)
    feed.put("slow", 1)
    feed.put("fast", 2)
    task = await run(lanes_of(recorder), feed)
    await recorder.until(lambda: recorder.handled.get("fast") == [2])
    assert feed.released == [2]
    gate.set()
    feed.end()
    await task
    assert feed.released == [2, 1]


async def test_a_delivery_that_fails_is_released_and_its_lane_goes_on() -> None:
    recorder, feed = Recorder(), HandFeed()
    recorder.failing.add(("a", 1))
    feed.put("a", 1)
    feed.put("a", 2)
    feed.end()
    await lanes_of(recorder).run(feed)
    assert recorder.handled["a"] == [2]
    assert sorted(feed.released) == [1, 2]


async def test_the_reader_waits_while_max_pending_deliveries_wait_in_lanes() -> None:
    recorder, feed = Recorder(), HandFeed()
    gate = recorder.gate("a", 1)
    for sequence in range(1, 6):
        feed.put("a", sequence)
    lanes = lanes_of(recorder, max_pending=2)
    task = await run(lanes, feed)
    await let_tasks_run()  # the reader has its turns: it must not take a third
    assert (feed.taken, lanes.pending) == (2, 2)
    gate.set()
    feed.end()
    await task
    assert recorder.handled["a"] == [1, 2, 3, 4, 5]


async def test_tick_runs_when_due_and_once_the_queue_is_empty() -> None:
    recorder, feed = Recorder(), HandFeed()
    recorder.due = [0.0]  # a flush is due at once
    feed.put("a", 1)
    task = await run(lanes_of(recorder), feed)
    await recorder.until(lambda: recorder.ticks == 2)  # after the delivery, then when due
    feed.end()
    await task


async def test_an_idle_lane_ends_and_the_next_delivery_opens_a_new_one() -> None:
    recorder, feed = Recorder(), HandFeed()
    lanes = lanes_of(recorder, idle=0)
    feed.put("a", 1)
    task = await run(lanes, feed)
    await recorder.until(lambda: recorder.handled.get("a") == [1])
    await recorder.until(lambda: recorder.ticks == 1)
    await let_tasks_run()  # the lane ends by itself (idle, not busy)
    feed.put("a", 2)
    feed.end()
    await task
    assert (recorder.opened, recorder.handled["a"]) == (["a", "a"], [1, 2])


async def test_a_busy_lane_stays_open_while_idle() -> None:
    recorder, feed = Recorder(), HandFeed()
    recorder.busy = True
    lanes = lanes_of(recorder, idle=0)
    feed.put("a", 1)
    task = await run(lanes, feed)
    await recorder.until(lambda: recorder.handled.get("a") == [1])
    await let_tasks_run()  # idle timeouts of zero pass: the lane stays
    feed.put("a", 2)
    feed.end()
    await task
    assert recorder.opened == ["a"]


def test_max_pending_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="max_pending must be at least 1"):
        ThreadLanes(lambda thread: RecordingLane(Recorder(), thread), max_pending=0)


async def test_a_lane_that_cannot_open_ends_the_run_with_its_error() -> None:
    class Unopenable(RecordingLane):
        async def open(self) -> None:
            raise RuntimeError("no such platform thread")

    feed = HandFeed()
    feed.put("a", 1)
    lanes = ThreadLanes(lambda thread: Unopenable(Recorder(), thread), name="test")
    with pytest.RaisesGroup(pytest.RaisesExc(RuntimeError, match="no such platform thread")):
        await lanes.run(feed)
