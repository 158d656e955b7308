"""Streams under store trouble: stale copies, failing saves, redeliveries, idle eviction."""

from __future__ import annotations

import asyncio

import pytest

from ore_core import Manager, NoticeEvent, OreError, Role, StaleThread, StoreError, Text
from ore_core.session.store_health import DELAYED_NOTICE
from ore_core.session.stores.memory import MemoryStore
from ore_core.session.stream import Stream
from ore_core.testing.faulty_store import FaultyStore
from ore_core.testing.processors import GatedProcessor, ScriptedProcessor
from tests.session.support import collect, kinds, message


class _Outcome:
    """What the stream said about one submitted event: handled or retry (with the error)."""

    def __init__(self) -> None:
        self.handled = asyncio.Event()
        self.retried: list[OreError] = []
        self.settled = asyncio.Event()

    def on_handled(self) -> None:
        self.handled.set()
        self.settled.set()

    def on_retry(self, error: OreError) -> None:
        self.retried.append(error)
        self.settled.set()


def _submit(stream: Stream, text: str, event_id: str) -> _Outcome:
    outcome = _Outcome()
    stream.submit(
        message(text, id=event_id), on_handled=outcome.on_handled, on_retry=outcome.on_retry
    )
    return outcome


async def test_a_stale_copy_is_dropped_unsaved_and_its_message_retried() -> None:
    store = MemoryStore()
    async with (
        Manager(store, ScriptedProcessor(["from a"])) as worker_a,
        Manager(store, ScriptedProcessor(["from b", "again"])) as worker_b,
    ):
        stream_a = await worker_a.create()
        stream_b = await worker_b.attach(stream_a.id)  # both hold the same version
        await stream_b.process(message("to b", id="e1"))
        outcome = _submit(stream_a, "to a", "e2")
        await asyncio.wait_for(outcome.settled.wait(), 5)
        assert [type(e) for e in outcome.retried] == [StaleThread]
        assert not outcome.handled.is_set()
        assert stream_a.closed
        assert worker_a.list() == []  # forgotten: the next message reloads the thread
        # The redelivery is handled against the reloaded thread: nothing forks.
        reloaded = await worker_b.attach(stream_a.id)
        await worker_b.close(reloaded.id)
        again = await worker_a.attach(stream_a.id)
        retry = _submit(again, "to a", "e2")
        await asyncio.wait_for(retry.handled.wait(), 5)
    stored = await store.get(stream_a.id)
    assert [t.role for t in stored.all_turns()] == [Role.USER, Role.ASSISTANT] * 2
    assert len(stored.turns()) == 4  # one line of conversation, no branch


async def test_a_failing_save_retries_the_message_and_tells_the_sender_once() -> None:
    store = FaultyStore(MemoryStore())
    async with Manager(store, ScriptedProcessor(["answer"])) as manager:
        notices: list[NoticeEvent] = []

        async def sink(thread_id: str, event: object) -> None:
            if isinstance(event, NoticeEvent):
                notices.append(event)

        manager.register_sink(["notice"], sink)
        thread_id = (await manager.create()).id
        store.failing = True
        for _ in range(3):  # three redeliveries while the disk is full
            stream = await manager.attach(thread_id)
            outcome = _submit(stream, "hi", "e1")
            await asyncio.wait_for(outcome.settled.wait(), 5)
            assert [type(e) for e in outcome.retried] == [StoreError]
            assert stream.closed
        assert not manager.store_health.usable
        store.failing = False
        stream = await manager.attach(thread_id)
        sub = stream.subscribe()
        outcome = _submit(stream, "hi", "e1")
        await asyncio.wait_for(outcome.handled.wait(), 5)
        events = await collect(sub)
        assert manager.store_health.usable
        await asyncio.sleep(0)  # let the sink run
    assert [n.content for n in notices] == [DELAYED_NOTICE]
    assert kinds(events)[0] == "turn_complete"
    assert kinds(events)[-1] == "lifecycle:done"
    stored = await store.get(thread_id)
    assert [t.role for t in stored.turns()] == [Role.USER, Role.ASSISTANT]


async def test_messages_queued_behind_a_failed_save_are_retried_in_order() -> None:
    store = FaultyStore(MemoryStore())
    gate = GatedProcessor()
    async with Manager(store, gate) as manager:
        stream = await manager.create()
        order: list[str] = []
        first = _submit(stream, "one", "e1")
        await asyncio.wait_for(gate.started.wait(), 5)
        outcomes = [first]
        for n in (2, 3):
            outcome = _Outcome()
            stream.submit(
                message(str(n), id=f"e{n}"),
                on_handled=outcome.on_handled,
                on_retry=lambda error, n=n: order.append(f"e{n}"),
            )
            outcomes.append(outcome)
        store.failing = True
        gate.release()
        await asyncio.wait_for(first.settled.wait(), 5)
        assert first.retried
        assert order == ["e2", "e3"]
        assert not any(o.handled.is_set() for o in outcomes)


async def test_redelivered_answered_message_gets_only_done() -> None:
    store = MemoryStore()
    processor = ScriptedProcessor(["answer"])
    async with Manager(store, processor) as manager:
        stream = await manager.create()
        await stream.process(message("hi", id="e1"))
        await stream.process(message("next", id="e2"))
        sub = stream.subscribe()
        outcome = _submit(stream, "hi", "e1")  # a redelivery of an old, answered message
        await asyncio.wait_for(outcome.handled.wait(), 5)
        assert kinds(await collect(sub)) == ["lifecycle:done"]
    assert processor.calls == 2


async def test_unanswered_message_redelivered_after_a_newer_one_is_answered_not_skipped() -> None:
    store = MemoryStore()
    thread = await store.create()
    thread.append(Role.USER, Text("first"), event_id="e1")
    thread.append(Role.USER, Text("second"), event_id="e2")
    thread.append(Role.ASSISTANT, Text("answer to both"))
    await store.save(thread)
    processor = ScriptedProcessor(["late answer"])
    async with Manager(store, processor) as manager:
        stream = await manager.attach(thread.id)
        outcome = _submit(stream, "first", "e1")
        await asyncio.wait_for(outcome.handled.wait(), 5)
    assert processor.calls == 1
    assert [t.role for t in stream.turns()][-2:] == [Role.USER, Role.ASSISTANT]


async def test_idle_streams_are_closed_and_reloaded_on_their_next_message() -> None:
    store = MemoryStore()
    async with Manager(store, ScriptedProcessor(["ok"]), idle_timeout=0.05) as manager:
        streams = [await manager.create() for _ in range(5)]
        for stream in streams:
            await stream.process(message("hi"))
        assert len(manager.list()) == 5

        async def evicted() -> None:
            while manager.list():  # noqa: ASYNC110 - polls the manager's state, no event
                await asyncio.sleep(0.01)

        await asyncio.wait_for(evicted(), 5)
        assert all(stream.closed for stream in streams)
        again = await manager.attach(streams[0].id)
        await again.process(message("again"))
        assert len(manager.list()) <= 1
        assert [t.role for t in again.turns()] == [Role.USER, Role.ASSISTANT] * 2


async def test_a_stream_with_a_subscriber_or_a_running_turn_is_not_evicted() -> None:
    gate = GatedProcessor()
    async with Manager(MemoryStore(), gate, idle_timeout=0.02) as manager:
        busy = await manager.create()
        watched = await manager.create()
        watched.subscribe()
        busy.submit(message("slow"))
        await asyncio.wait_for(gate.started.wait(), 5)
        await asyncio.sleep(0.2)
        assert {s.id for s in manager.list()} == {busy.id, watched.id}
        gate.release()


async def test_process_raises_the_store_error_after_a_failed_save() -> None:
    store = FaultyStore(MemoryStore())
    async with Manager(store, ScriptedProcessor(["x"])) as manager:
        stream = await manager.create()
        store.failing = True
        with pytest.raises(StoreError, match="injected"):
            await stream.process(message("hi"))
