"""Manager behaviour (docs/go-compatibility.md: behaviour kept, defects 8)."""

from __future__ import annotations

import asyncio
import gc
import weakref

import pytest

from ore_core import (
    Manager,
    OutputEvent,
    Role,
    SessionNotFound,
    StoreError,
    ThreadExists,
    ThreadNotFound,
)
from ore_core.session.fanout import EventBuffer
from ore_core.session.manager import _push_all
from ore_core.session.stores.memory import MemoryStore
from ore_core.testing.faulty_store import FaultyStore
from ore_core.testing.processors import ScriptedProcessor
from tests.session.support import ECHO_TURN, kinds, message
from tests.session.test_turn_encoded_once import counting_calls


@pytest.fixture
async def manager() -> Manager:
    async with Manager(MemoryStore(), ScriptedProcessor(["Hello"], chunk=10)) as m:
        yield m  # type: ignore[misc]


class Recorder:
    """A sink that records (thread_id, event) and signals after `expected` events."""

    def __init__(self, expected: int = 1) -> None:
        self.events: list[tuple[str, OutputEvent]] = []
        self.expected = expected
        self.enough = asyncio.Event()

    async def __call__(self, thread_id: str, event: OutputEvent) -> None:
        self.events.append((thread_id, event))
        if len(self.events) >= self.expected:
            self.enough.set()

    async def wait(self) -> None:
        await asyncio.wait_for(self.enough.wait(), 30)


async def test_create_returns_an_active_stream_with_a_stored_thread(manager: Manager) -> None:
    stream = await manager.create({"title": "t"})
    assert manager.get(stream.id) is stream
    assert (await manager.store.get(stream.id)).meta().get("title") == "t"


async def test_default_metadata_applies_to_new_threads() -> None:
    async with Manager(
        MemoryStore(), ScriptedProcessor(), default_metadata={"ore.model.name": "m"}
    ) as manager:
        stream = await manager.create()
    assert stream.spec().name == "m"


async def test_create_with_an_existing_id_never_overwrites_the_thread(manager: Manager) -> None:
    stream = await manager.create_with_id("conversation-1")
    await stream.process(message("keep me"))
    with pytest.raises(ThreadExists):
        await manager.create_with_id("conversation-1")
    assert len((await manager.store.get("conversation-1")).turns()) == 2


async def test_attach_twice_returns_the_same_stream(manager: Manager) -> None:
    stream = await manager.create()
    await manager.close(stream.id)
    first = await manager.attach(stream.id)
    assert await manager.attach(stream.id) is first
    assert manager.list() == [first]


async def test_fifty_concurrent_attaches_yield_one_stream(manager: Manager) -> None:
    stream = await manager.create()
    await manager.close(stream.id)
    attached = await asyncio.gather(*(manager.attach(stream.id) for _ in range(50)))
    assert len({id(s) for s in attached}) == 1
    assert len(manager.list()) == 1


async def test_attach_unknown_thread_raises_thread_not_found(manager: Manager) -> None:
    with pytest.raises(ThreadNotFound):
        await manager.attach("no-such-thread")
    with pytest.raises(ThreadNotFound):
        await asyncio.gather(*(manager.attach("no-such-thread") for _ in range(3)))
    assert manager.list() == []


async def test_closed_stream_leaves_the_manager_but_the_thread_stays(manager: Manager) -> None:
    stream = await manager.create()
    await stream.process(message("hi"))
    await stream.close()
    assert manager.list() == []
    with pytest.raises(SessionNotFound, match=stream.id):
        manager.get(stream.id)
    with pytest.raises(SessionNotFound):
        await manager.close(stream.id)
    assert len((await manager.get_thread(stream.id)).turns()) == 2


async def test_a_closed_stream_and_its_thread_are_freed_at_once(manager: Manager) -> None:
    """Freed by reference counting, not left to the cycle collector: a serving core runs
    its full passes rarely, and a closed stream's thread holds every turn it had."""
    stream = await manager.create()
    await stream.process(message("hi"))
    await stream.set_metadata("k", "v")
    await stream.close()
    await asyncio.sleep(0)  # the worker task's last step
    gone = (weakref.ref(stream), weakref.ref(stream.state()))
    gc.disable()
    try:
        del stream
        assert [ref() for ref in gone] == [None, None]
    finally:
        gc.enable()


async def test_lookup_or_create_is_atomic_for_racing_callers(manager: Manager) -> None:
    results = await asyncio.gather(
        *(manager.lookup_or_create("slack.thread", "C1:1712.1") for _ in range(20))
    )
    assert len({stream.id for stream, _ in results}) == 1
    assert sum(created for _, created in results) == 1
    assert len(manager.list()) == 1


async def test_sink_receives_the_seven_events_of_a_message(manager: Manager) -> None:
    recorder = Recorder(expected=7)
    await_unregister = manager.register_sink([], recorder)
    stream = await manager.create()
    await stream.process(message("hi"))
    await recorder.wait()
    assert kinds([e for _, e in recorder.events]) == ECHO_TURN
    assert {tid for tid, _ in recorder.events} == {stream.id}
    await await_unregister()


async def test_sink_sees_existing_and_future_streams_tagged_by_id(manager: Manager) -> None:
    before = await manager.create()
    recorder = Recorder(expected=2)
    manager.register_sink(["lifecycle"], _only_done(recorder))
    after = await manager.create()
    await before.process(message("a"))
    await after.process(message("b"))
    await recorder.wait()
    assert {tid for tid, _ in recorder.events} == {before.id, after.id}


def _only_done(recorder: Recorder):  # type: ignore[no-untyped-def]
    async def sink(thread_id: str, event: OutputEvent) -> None:
        if getattr(event, "phase", "") == "done":
            await recorder(thread_id, event)

    return sink


async def test_sink_kind_filter(manager: Manager) -> None:
    recorder = Recorder(expected=3)
    manager.register_sink(["text_delta", "turn_complete"], recorder)
    stream = await manager.create()
    await stream.process(message("hi"))
    await recorder.wait()
    assert [e.kind for _, e in recorder.events] == ["turn_complete", "text_delta", "turn_complete"]


async def test_unregistered_sink_stops_receiving_and_double_unregister_is_safe(
    manager: Manager,
) -> None:
    recorder = Recorder(expected=7)
    unregister = manager.register_sink([], recorder)
    stream = await manager.create()
    await stream.process(message("one"))
    await recorder.wait()
    await unregister()
    await unregister()
    await stream.process(message("two"))
    assert len(recorder.events) == 7


async def test_failing_sink_is_isolated_from_other_sinks_and_the_stream(
    manager: Manager,
) -> None:
    async def broken(thread_id: str, event: OutputEvent) -> None:
        raise RuntimeError("sink exploded")

    recorder = Recorder(expected=14)
    manager.register_sink([], broken, name="broken")
    manager.register_sink([], recorder)
    stream = await manager.create()
    await stream.process(message("one"))
    await stream.process(message("two"))
    await recorder.wait()
    assert len(stream.turns()) == 4


async def test_stuck_sink_never_stalls_the_stream(manager: Manager) -> None:
    never = asyncio.Event()

    async def stuck(thread_id: str, event: OutputEvent) -> None:
        await never.wait()

    manager.register_sink([], stuck, name="stuck")
    stream = await manager.create()
    for index in range(20):
        await asyncio.wait_for(stream.process(message(f"m{index}")), 30)
    assert len(stream.turns()) == 40
    never.set()


async def test_both_turn_completes_carry_the_input_provenance(manager: Manager) -> None:
    recorder = Recorder(expected=2)
    manager.register_sink(["turn_complete"], recorder)
    stream = await manager.create()
    await stream.process(message("hi", provenance="slack"))
    await recorder.wait()
    assert [e.context.provenance for _, e in recorder.events] == ["slack", "slack"]
    assert [e.turn.role for _, e in recorder.events] == [  # type: ignore[union-attr]
        Role.USER,
        Role.ASSISTANT,
    ]


async def test_delete_thread_closes_the_stream_and_removes_it(manager: Manager) -> None:
    stream = await manager.create()
    assert await manager.delete_thread(stream.id) is True
    assert stream.closed
    with pytest.raises(ThreadNotFound):
        await manager.get_thread(stream.id)


async def test_aclose_closes_every_stream() -> None:
    manager = Manager(MemoryStore(), ScriptedProcessor())
    streams = [await manager.create() for _ in range(3)]
    await manager.aclose()
    assert all(s.closed for s in streams)
    assert manager.list() == []


async def test_a_sink_far_behind_is_disconnected_without_harming_the_stream() -> None:
    gate = asyncio.Event()
    seen: list[str] = []

    async def stuck(thread_id: str, event: OutputEvent) -> None:
        seen.append(event.kind)
        await gate.wait()

    async with Manager(MemoryStore(), ScriptedProcessor(["a"]), subscriber_buffer=4) as manager:
        manager.register_sink([], stuck, name="stuck")
        stream = await manager.create()
        for index in range(10):
            await stream.process(message(f"m{index}"))
        gate.set()
        assert len(stream.turns()) == 20
    assert len(seen) < 70


async def test_a_lossless_sink_gets_every_stored_event_even_far_behind() -> None:
    gate = asyncio.Event()
    recorder = Recorder(expected=10 * 6)

    async def slow(thread_id: str, event: OutputEvent) -> None:
        await gate.wait()
        if event.kind != "text_delta":
            await recorder(thread_id, event)

    async with Manager(MemoryStore(), ScriptedProcessor(["a"]), subscriber_buffer=4) as manager:
        manager.register_sink([], slow, name="egress", lossless=True)
        stream = await manager.create()
        for index in range(10):
            await stream.process(message(f"m{index}"))
        gate.set()
        await recorder.wait()
    assert sum(e.kind == "turn_complete" for _, e in recorder.events) == 20


async def test_a_batch_sink_hears_of_an_abandoned_turn_between_its_events_and_the_retry() -> None:
    store = FaultyStore(MemoryStore())
    async with Manager(store, ScriptedProcessor(["ok"])) as manager:
        heard: list[str] = []
        answered = asyncio.Event()

        async def sink(items: list[tuple[str, OutputEvent | None]]) -> None:
            for thread_id, event in items:
                heard.append(f"abandoned {thread_id}" if event is None else kinds([event])[0])
            if heard[-1] == "lifecycle:done":
                answered.set()

        manager.register_batch_sink((), sink, name="holder")
        thread_id = (await manager.create()).id
        store.failing = True
        with pytest.raises(StoreError):
            await (await manager.attach(thread_id)).process(message("hi", id="e1"))
        store.failing = False
        await (await manager.attach(thread_id)).process(message("hi", id="e1"))
        await asyncio.wait_for(answered.wait(), 30)
        assert manager.sink_queued("holder") == len(heard)  # the mark counts as an item
    turn = ECHO_TURN[:-1]
    # The given-up turn (all but its `done`, then the delayed notice), the mark, the retry.
    assert heard == [*turn, "notice", f"abandoned {thread_id}", *turn, "lifecycle:done"]


async def test_a_batch_sink_gets_a_whole_turn_in_one_call() -> None:
    # One wake-up of the sink's task per burst of events, not one per event.
    async with Manager(MemoryStore(), ScriptedProcessor(["Hello"], chunk=10)) as manager:
        calls: list[list[str]] = []
        done = asyncio.Event()

        async def sink(items: list[tuple[str, OutputEvent | None]]) -> None:
            calls.append(kinds([event for _, event in items if event is not None]))
            if calls[-1][-1] == "lifecycle:done":
                done.set()

        manager.register_batch_sink((), sink, name="batch")
        stream = await manager.create()
        await stream.process(message("hi"))
        await asyncio.wait_for(done.wait(), 30)
    assert calls == [ECHO_TURN]


async def test_a_sink_is_given_only_the_kinds_it_takes(manager: Manager) -> None:
    recorder = Recorder(expected=3)
    manager.register_sink(["lifecycle"], recorder, name="phases")
    stream = await manager.create()
    await stream.process(message("hi"))
    await recorder.wait()
    assert manager.sink_queued("phases") == 3  # submitted, streaming, done: nothing else


async def test_a_sink_registered_between_turns_gets_every_kind_of_the_next_turn(
    manager: Manager,
) -> None:
    stream = await manager.create()
    first = Recorder(expected=7)
    manager.register_sink([], first, name="first")
    await stream.process(message("one"))
    await first.wait()
    later = Recorder(expected=7)
    unregister_later = manager.register_sink([], later, name="later")
    await stream.process(message("two"))
    await later.wait()
    await unregister_later()
    phases = Recorder(expected=3)
    manager.register_sink(["lifecycle"], phases, name="phases")
    await stream.process(message("three"))
    await phases.wait()
    assert len(later.events) == 7  # unregistered before the third turn
    assert manager.sink_queued("later") == 0
    assert manager.sink_queued("phases") == 3


async def test_an_event_for_one_sink_is_pushed_to_it_directly_and_for_two_through_one_loop() -> (
    None
):
    """The route of a kind is the lone sink's own push (no fan-out loop per event, the
    common case: the bus egress takes every kind), or one loop over several pushes."""
    async with Manager(MemoryStore(), ScriptedProcessor(["Hello"])) as manager:
        manager.register_sink((), _ignore, name="all")
        stream = await manager.create()
        with counting_calls(_push_all, EventBuffer.push) as counts:
            await stream.process(message("hi"))
        events = manager.sink_queued("all")
        assert events >= len(ECHO_TURN)
        assert counts == {"_push_all": 0, "push": events}
        manager.register_sink(("lifecycle",), _ignore, name="phases")
        with counting_calls(_push_all, EventBuffer.push) as counts:
            await stream.process(message("again"))
        assert manager.sink_queued("all") == 2 * events
        assert manager.sink_queued("phases") == 3  # submitted, streaming, done
        assert counts == {"_push_all": 3, "push": events + 3}


async def _ignore(thread_id: str, event: OutputEvent) -> None:
    return None
