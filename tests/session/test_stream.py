"""Stream behaviour (docs/go-compatibility.md: behaviour kept, defects 4, 5, 7)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from ore_core import (
    ArtifactEvent,
    ErrorEvent,
    EventContext,
    Interrupted,
    InterruptEvent,
    LifecycleEvent,
    Manager,
    MessageRejected,
    NoticeEvent,
    PropertiesEvent,
    Reasoning,
    Role,
    SessionClosed,
    StoreError,
    Text,
    TextDelta,
    Thread,
    ToolCallDelta,
    TurnCancelled,
    TurnCompleteEvent,
    TurnFailed,
)
from ore_core.session.policy import DoubleTexting
from ore_core.session.stores.memory import MemoryStore
from ore_core.testing.processors import GatedProcessor, ScriptedProcessor
from tests.session.support import ECHO_TURN, collect, is_done, kinds, message


@pytest.fixture
def store() -> MemoryStore:
    return MemoryStore()


async def test_one_message_emits_the_seven_event_sequence(store: MemoryStore) -> None:
    async with Manager(store, ScriptedProcessor(["Hello"], chunk=10)) as manager:
        stream = await manager.create()
        sub = stream.subscribe()
        await stream.process(message("hi"))
        events = await collect(sub)
    assert kinds(events) == ECHO_TURN
    assert all(e.context.provenance == "test" for e in events)


async def test_user_and_assistant_turns_are_stored_after_a_message(store: MemoryStore) -> None:
    async with Manager(store, ScriptedProcessor(["Hello world"])) as manager:
        stream = await manager.create()
        await stream.process(message("hi"))
        stored = await store.get(stream.id)
    assert [t.role for t in stored.turns()] == [Role.USER, Role.ASSISTANT]
    assert stored.turns()[1].artifacts == (Text("Hello world"),)


async def test_turn_complete_carries_the_stored_turn_id(store: MemoryStore) -> None:
    async with Manager(store, ScriptedProcessor(["x"])) as manager:
        stream = await manager.create()
        sub = stream.subscribe("turn_complete")
        await stream.process(message("hi"))
        events = await collect(sub, count=2, until=lambda e: True)
    ids = [e.turn.id for e in events if isinstance(e, TurnCompleteEvent)]
    assert ids == [t.id for t in stream.turns()]


async def test_events_are_handled_in_fifo_order(store: MemoryStore) -> None:
    processor = ScriptedProcessor(["a"])
    async with Manager(store, processor) as manager:
        stream = await manager.create()
        sub = stream.subscribe("turn_complete")
        for text in ("first", "second", "third"):
            stream.submit(message(text))
        events = await collect(sub, count=6, until=lambda e: True)
    users = [
        e.turn.artifacts[0]
        for e in events
        if isinstance(e, TurnCompleteEvent) and e.turn.role == Role.USER
    ]
    assert users == [Text("first"), Text("second"), Text("third")]
    assert processor.seen_turns == [1, 3, 5]


async def test_submit_returns_before_the_turn_runs(store: MemoryStore) -> None:
    gate = GatedProcessor()
    async with Manager(store, gate) as manager:
        stream = await manager.create()
        stream.submit(message("hi"))
        assert gate.calls == 0
        gate.release()


async def test_processor_error_emits_error_then_done_and_keeps_user_turn(
    store: MemoryStore,
) -> None:
    async with Manager(store, ScriptedProcessor([RuntimeError("boom")])) as manager:
        stream = await manager.create()
        sub = stream.subscribe("error", "lifecycle")
        with pytest.raises(TurnFailed, match="boom"):
            await stream.process(message("hi"))
        events = await collect(sub)
        stored = await store.get(stream.id)
    errors = [e for e in events if isinstance(e, ErrorEvent)]
    assert len(errors) == 1
    assert "boom" in errors[0].message
    assert kinds(events)[-1] == "lifecycle:done"
    assert [t.role for t in stored.turns()] == [Role.USER]


async def test_delta_then_error_discards_the_partial_answer(store: MemoryStore) -> None:
    class HalfThenFail:
        async def __call__(self, ctx):  # type: ignore[no-untyped-def]
            async def source():  # type: ignore[no-untyped-def]
                yield TextDelta("par")
                raise RuntimeError("cut")

            await ctx.step(source())

    async with Manager(store, HalfThenFail()) as manager:
        stream = await manager.create()
        sub = stream.subscribe("error")
        with pytest.raises(TurnFailed):
            await stream.process(message("hi"))
        events = await collect(sub, until=lambda e: True)
    assert len(events) == 1
    assert [t.role for t in stream.turns()] == [Role.USER]


async def test_save_failure_is_reported_as_an_error_and_done_still_follows(
    store: MemoryStore,
) -> None:
    class FailingSaves(MemoryStore):
        fail = False

        async def save(self, thread):  # type: ignore[no-untyped-def]
            if self.fail:
                raise OSError("disk full")
            await super().save(thread)

    failing = FailingSaves()
    async with Manager(failing, ScriptedProcessor(["ok"])) as manager:
        stream = await manager.create()
        failing.fail = True
        sub = stream.subscribe("error", "lifecycle")
        with pytest.raises(TurnFailed, match="disk full"):
            await stream.process(message("hi"))
        events = await collect(sub)
    assert any(isinstance(e, ErrorEvent) and "disk full" in e.message for e in events)
    assert is_done(events[-1])


async def test_interrupt_cancels_the_turn_and_drops_queued_messages(store: MemoryStore) -> None:
    gate = GatedProcessor()
    async with Manager(store, gate) as manager:
        stream = await manager.create()
        sub = stream.subscribe("lifecycle", "error")
        running = asyncio.create_task(stream.process(message("one")))
        await asyncio.wait_for(gate.started.wait(), 30)
        queued = [asyncio.create_task(stream.process(message(t))) for t in ("two", "three")]
        await asyncio.sleep(0)
        stream.submit(InterruptEvent(context=EventContext(provenance="test")))
        with pytest.raises(TurnCancelled):
            await running
        for task in queued:
            with pytest.raises(Interrupted):
                await task
        events = await collect(sub, count=2)
    assert kinds(events) == [
        "lifecycle:submitted",
        "lifecycle:streaming",
        "lifecycle:cancelled",
        "lifecycle:done",
        "lifecycle:done",
    ]
    assert gate.cancelled == 1
    assert [t.role for t in stream.turns()] == [Role.USER]


async def test_cancel_when_idle_is_a_no_op(store: MemoryStore) -> None:
    async with Manager(store, ScriptedProcessor()) as manager:
        stream = await manager.create()
        stream.cancel()
        await stream.process(message("still works"))
    assert len(stream.turns()) == 2


async def test_cancelling_the_process_caller_only_stops_waiting(store: MemoryStore) -> None:
    gate = GatedProcessor()
    async with Manager(store, gate) as manager:
        stream = await manager.create()
        sub = stream.subscribe("lifecycle")
        waiting = asyncio.create_task(stream.process(message("hi")))
        await asyncio.wait_for(gate.started.wait(), 30)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        gate.release()
        events = await collect(sub)
    assert "lifecycle:cancelled" not in kinds(events)
    assert [t.role for t in stream.turns()] == [Role.USER, Role.ASSISTANT]


async def test_closed_stream_refuses_everything_with_session_closed(store: MemoryStore) -> None:
    async with Manager(store, ScriptedProcessor()) as manager:
        stream = await manager.create()
        await stream.close()
        with pytest.raises(SessionClosed, match=f"session {stream.id} is closed"):
            stream.submit(message("x"))
        with pytest.raises(SessionClosed):
            await stream.process(message("x"))
        with pytest.raises(SessionClosed):
            await stream.emit(LifecycleEvent(phase="done"))
        with pytest.raises(SessionClosed):
            stream.cancel()
        with pytest.raises(SessionClosed):
            await stream.append_turn(Role.USER, Text("x"))
        sub = stream.subscribe()
        assert [e async for e in sub] == []
        await stream.close()


async def test_close_before_the_worker_starts_is_safe(store: MemoryStore) -> None:
    async with Manager(store, ScriptedProcessor()) as manager:
        stream = await manager.create()
        await stream.close()
        await stream.close()
        assert manager.list() == []
        assert (await store.get(stream.id)).id == stream.id


async def test_close_during_a_slow_turn_fails_waiters_quickly(store: MemoryStore) -> None:
    gate = GatedProcessor()
    async with Manager(store, gate) as manager:
        stream = await manager.create()
        running = asyncio.create_task(stream.process(message("one")))
        queued = asyncio.create_task(stream.process(message("two")))
        await asyncio.wait_for(gate.started.wait(), 30)
        await asyncio.wait_for(stream.close(), 30)
        with pytest.raises(TurnCancelled):
            await running
        with pytest.raises(SessionClosed):
            await queued


async def test_subscriptions_end_when_the_stream_closes(store: MemoryStore) -> None:
    async with Manager(store, ScriptedProcessor()) as manager:
        stream = await manager.create()
        sub = stream.subscribe()
        reader = asyncio.create_task(collect(sub, until=lambda e: False))
        await stream.close()
        with pytest.raises(StopAsyncIteration):
            await sub.__anext__()
        reader.cancel()


async def test_emit_reaches_subscribers_while_a_turn_runs(store: MemoryStore) -> None:
    gate = GatedProcessor()
    async with Manager(store, gate) as manager:
        stream = await manager.create()
        sub = stream.subscribe("notice")
        stream.submit(message("hi"))
        await asyncio.wait_for(gate.started.wait(), 30)
        await stream.emit(NoticeEvent(content="working"))
        events = await collect(sub, until=lambda e: True)
        gate.release()
    assert isinstance(events[0], NoticeEvent)
    assert events[0].content == "working"


async def test_a_slow_subscriber_does_not_stall_the_stream_or_others(store: MemoryStore) -> None:
    long_reply = "x" * 4000
    async with Manager(store, ScriptedProcessor([long_reply], chunk=1)) as manager:
        stream = await manager.create()
        laggard = stream.subscribe(maxsize=8)
        fast = stream.subscribe(maxsize=8192)
        await asyncio.wait_for(stream.process(message("hi")), 30)
        fast_events = await collect(fast)
        lag_events = [e async for e in _drain(laggard)]
    assert sum(1 for e in fast_events if e.kind == "text_delta") == 4000
    assert laggard.dropped + sum(1 for e in lag_events if e.kind == "text_delta") <= 4000
    lag_kinds = kinds(lag_events)
    for must_keep in ("turn_complete", "lifecycle:submitted", "lifecycle:done", "text"):
        assert must_keep in lag_kinds
    text = next(e for e in lag_events if e.kind == "text")
    assert isinstance(text, ArtifactEvent)
    assert text.artifact == Text(long_reply)
    coalesced = "".join(
        e.artifact.content  # type: ignore[attr-defined]
        for e in lag_events
        if isinstance(e, ArtifactEvent) and isinstance(e.artifact, TextDelta)
    )
    assert long_reply.startswith(coalesced)


async def _drain(sub):  # type: ignore[no-untyped-def]
    while (event := sub.get_nowait()) is not None:
        yield event


async def test_set_and_delete_metadata_emit_properties_with_app_provenance(
    store: MemoryStore,
) -> None:
    async with Manager(store, ScriptedProcessor()) as manager:
        stream = await manager.create()
        sub = stream.subscribe("properties")
        await stream.set_metadata("title", "hello")
        await stream.delete_metadata("title")
        await stream.delete_metadata("missing")
        events = await collect(sub, count=3, until=lambda e: True)
        stored = await store.get(stream.id)
    ops = [(e.operations[0].op, e.operations[0].key) for e in events]  # type: ignore[union-attr,index]
    assert ops == [("set", "title"), ("delete", "title"), ("delete", "missing")]
    assert all(e.context.provenance == "app" for e in events)
    assert isinstance(events[1], PropertiesEvent)
    assert events[1].operations[0].value == ""  # type: ignore[index]
    assert stored.meta().get("title") is None


async def test_model_chosen_in_metadata_reaches_the_processor(store: MemoryStore) -> None:
    processor = ScriptedProcessor()
    async with Manager(store, processor) as manager:
        stream = await manager.create()
        await stream.set_metadata("ore.model.name", "gpt-test")
        await stream.set_metadata("ore.model.temperature", "0.5")
        await stream.set_metadata("ore.model.max_output_tokens", "not-a-number")
        await stream.process(message("hi"))
    spec = processor.seen_specs[0]
    assert (spec.name, spec.temperature, spec.max_output_tokens) == ("gpt-test", 0.5, None)


async def test_mark_boundary_survives_a_reload(store: MemoryStore) -> None:
    async with Manager(store, ScriptedProcessor(["a1", "a2"])) as manager:
        stream = await manager.create()
        await stream.process(message("u1"))
        summary = await stream.append_turn(Role.SYSTEM, Text("summary"))
        await stream.mark_boundary(summary.id, '{"strategy":"summarize"}')
        await stream.process(message("u2"))
        await manager.close(stream.id)
        reloaded = await manager.attach(stream.id)
    path = reloaded.turns()
    assert path[0].id == summary.id
    assert [t.role for t in path] == [Role.SYSTEM, Role.USER, Role.ASSISTANT]
    assert reloaded.get_metadata("ore.compaction.boundary.info") == '{"strategy":"summarize"}'


async def test_redelivered_message_is_recorded_and_answered_once(store: MemoryStore) -> None:
    processor = ScriptedProcessor(["answer"])
    async with Manager(store, processor) as manager:
        stream = await manager.create()
        first = message("hi", id="evt-1")
        await stream.process(first)
        await stream.process(message("hi", id="evt-1"))
    assert processor.calls == 1
    assert [t.role for t in stream.turns()] == [Role.USER, Role.ASSISTANT]


async def test_recorded_but_unanswered_message_is_answered_on_redelivery(
    store: MemoryStore,
) -> None:
    async with Manager(store, ScriptedProcessor([RuntimeError("crash")])) as manager:
        stream = await manager.create()
        with pytest.raises(TurnFailed):
            await stream.process(message("hi", id="evt-2"))
    processor = ScriptedProcessor(["recovered"])
    async with Manager(store, processor) as manager:
        stream = await manager.attach(stream.id)
        await stream.process(message("hi", id="evt-2"))
    assert processor.calls == 1
    assert [t.role for t in stream.turns()] == [Role.USER, Role.ASSISTANT]


class CountingStore(MemoryStore):
    """A memory store that counts its saves and can be made to fail them."""

    def __init__(self) -> None:
        super().__init__()
        self.saves = 0
        self.failing = False

    async def save(self, thread: Thread) -> None:
        self.saves += 1
        if self.failing:
            raise StoreError("No space left on device (injected)")
        await super().save(thread)


async def test_a_turn_is_saved_once_after_the_processor_and_before_done() -> None:
    store = CountingStore()
    gate = GatedProcessor()
    async with Manager(store, gate) as manager:
        stream = await manager.create()
        handled = asyncio.Event()
        stream.submit(message("hi"), on_handled=handled.set)
        await asyncio.wait_for(gate.started.wait(), 30)
        assert (await store.get(stream.id)).turns() == []  # nothing stored mid-turn
        assert store.saves == 0
        gate.release()
        await asyncio.wait_for(handled.wait(), 30)
        stored = await store.get(stream.id)
        assert [t.role for t in stored.turns()] == [Role.USER, Role.ASSISTANT]
        assert store.saves == 1
        for n in range(3):
            await stream.process(message(f"more {n}"))
        assert store.saves == 4  # one per turn


async def test_while_the_store_fails_the_user_turn_is_saved_before_the_processor_runs() -> None:
    store = CountingStore()
    gate = GatedProcessor()
    async with Manager(store, gate) as manager:
        thread_id = (await manager.create()).id
        store.failing = True
        gate.release()
        with pytest.raises(StoreError):  # found at the end of the turn: the model ran
            await (await manager.attach(thread_id)).process(message("hi", id="e1"))
        assert gate.calls == 1
        assert not manager.store_health.usable
        with pytest.raises(StoreError):  # a retry during the outage: no model call
            await (await manager.attach(thread_id)).process(message("hi", id="e1"))
        assert gate.calls == 1
        store.failing = False
        gate = GatedProcessor()
        manager.processor = gate
        stream = await manager.attach(thread_id)
        handled = asyncio.Event()
        stream.submit(message("hi", id="e1"), on_handled=handled.set)
        await asyncio.wait_for(gate.started.wait(), 30)
        stored = await store.get(thread_id)
        assert [t.role for t in stored.turns()] == [Role.USER]  # saved before the model
        gate.release()
        await asyncio.wait_for(handled.wait(), 30)
        assert manager.store_health.usable
        stored = await store.get(thread_id)
        assert [t.role for t in stored.turns()] == [Role.USER, Role.ASSISTANT]


class GatedSaveStore(MemoryStore):
    """A memory store whose final saves (a thread with an answer) wait for `release`."""

    def __init__(self) -> None:
        super().__init__()
        self.saving = asyncio.Event()
        self.release = asyncio.Event()

    async def save(self, thread: Thread) -> None:
        if len(thread.turns()) > 1:
            self.saving.set()
            await self.release.wait()
        await super().save(thread)


async def test_a_cancel_during_the_final_save_does_not_cut_the_turn_short() -> None:
    store = GatedSaveStore()
    async with Manager(store, ScriptedProcessor(["answer"])) as manager:
        stream = await manager.create()
        handled = asyncio.Event()
        sub = stream.subscribe("lifecycle")
        stream.submit(message("hi"), on_handled=handled.set)
        await asyncio.wait_for(store.saving.wait(), 5)
        stream.cancel()  # the processor is done: nothing left to cancel
        store.release.set()
        await asyncio.wait_for(handled.wait(), 5)
        stored = await store.get(stream.id)
        assert [t.role for t in stored.turns()] == [Role.USER, Role.ASSISTANT]
        phases = [getattr(sub.get_nowait(), "phase", None) for _ in range(4)]
        assert phases == ["submitted", "streaming", "done", None]  # no "cancelled"


class SwallowingProcessor:
    """Waits until cancelled, swallows the cancellation and answers anyway."""

    def __init__(self) -> None:
        self.started = asyncio.Event()

    async def __call__(self, ctx: Any) -> None:
        if not self.started.is_set():
            self.started.set()
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                pass
        await ctx.append(Role.ASSISTANT, Text("anyway"))


async def test_a_processor_that_swallows_a_cancel_does_not_stop_the_stream(
    store: MemoryStore,
) -> None:
    processor = SwallowingProcessor()
    async with Manager(store, processor) as manager:
        stream = await manager.create()
        stream.submit(message("first"))
        await asyncio.wait_for(processor.started.wait(), 5)
        stream.cancel()
        await asyncio.wait_for(stream.process(message("second")), 5)
        assert [t.role for t in stream.turns()][:2] == [Role.USER, Role.ASSISTANT]


async def test_on_handled_fires_after_done_and_the_final_save(store: MemoryStore) -> None:
    gate = GatedProcessor()
    async with Manager(store, gate) as manager:
        stream = await manager.create()
        handled = asyncio.Event()
        sub = stream.subscribe("lifecycle")
        stream.submit(message("hi"), on_handled=handled.set)
        await asyncio.wait_for(gate.started.wait(), 30)
        assert not handled.is_set()
        gate.release()
        await asyncio.wait_for(handled.wait(), 30)
        assert kinds(await collect(sub))[-1] == "lifecycle:done"
        assert [t.role for t in (await store.get(stream.id)).turns()] == [
            Role.USER,
            Role.ASSISTANT,
        ]


async def test_on_handled_is_not_called_for_turns_cut_short_by_close(store: MemoryStore) -> None:
    gate = GatedProcessor()
    async with Manager(store, gate) as manager:
        stream = await manager.create()
        calls: list[str] = []
        stream.submit(message("one"), on_handled=lambda: calls.append("one"))
        await asyncio.wait_for(gate.started.wait(), 30)
        stream.submit(message("two"), on_handled=lambda: calls.append("two"))
        await stream.close()
    assert calls == []


async def test_step_merges_interleaved_deltas_per_key_in_first_seen_order(
    store: MemoryStore,
) -> None:
    reply = [
        TextDelta("Hello "),
        ToolCallDelta(index=0, id="c1", name="se", arguments='{"q":'),
        TextDelta("world"),
        ToolCallDelta(index=0, name="arch", arguments='"x"}'),
    ]
    async with Manager(store, ScriptedProcessor([reply])) as manager:
        stream = await manager.create()
        await stream.process(message("hi"))
    answer = stream.turns()[-1].artifacts
    assert answer[0] == Text("Hello world")
    assert answer[1].kind == "tool_call"
    assert (answer[1].name, answer[1].arguments) == ("search", '{"q":"x"}')  # type: ignore[attr-defined]


async def test_complete_artifact_flushes_pending_deltas_first(store: MemoryStore) -> None:
    reply = [TextDelta("Hello "), Reasoning("think"), TextDelta("world")]
    async with Manager(store, ScriptedProcessor([reply])) as manager:
        stream = await manager.create()
        sub = stream.subscribe("text", "reasoning", "text_delta")
        await stream.process(message("hi"))
        events = await collect(sub, count=5, until=lambda e: True)
    assert [
        (e.kind, getattr(e.artifact, "content", "")) for e in events if isinstance(e, ArtifactEvent)
    ] == [
        ("text_delta", "Hello "),
        ("text", "Hello "),
        ("reasoning", "think"),
        ("text_delta", "world"),
        ("text", "world"),
    ]


async def test_empty_model_output_records_an_empty_assistant_turn_without_streaming(
    store: MemoryStore,
) -> None:
    async with Manager(store, ScriptedProcessor([[]])) as manager:
        stream = await manager.create()
        sub = stream.subscribe("lifecycle")
        await stream.process(message("hi"))
        events = await collect(sub)
    assert kinds(events) == ["lifecycle:submitted", "lifecycle:done"]
    assert stream.turns()[-1].artifacts == ()


@pytest.mark.parametrize(
    ("policy", "expected_users", "expected_calls"),
    [
        (DoubleTexting.QUEUE, ["one", "two", "three"], 3),
        (DoubleTexting.COLLECT, ["one", "two\n\nthree"], 2),
    ],
)
async def test_double_texting_queue_and_collect(
    store: MemoryStore, policy: DoubleTexting, expected_users: list[str], expected_calls: int
) -> None:
    gate = GatedProcessor()
    async with Manager(store, gate, policy=policy) as manager:
        stream = await manager.create()
        first = asyncio.create_task(stream.process(message("one")))
        await asyncio.wait_for(gate.started.wait(), 30)
        later = [asyncio.create_task(stream.process(message(t))) for t in ("two", "three")]
        await asyncio.sleep(0)
        gate.release()
        await asyncio.wait_for(asyncio.gather(first, *later), 30)
    users = [t.artifacts[0] for t in stream.turns() if t.role == Role.USER]
    assert users == [Text(u) for u in expected_users]
    assert gate.calls == expected_calls


async def test_double_texting_interrupt_cancels_the_running_turn(store: MemoryStore) -> None:
    gate = GatedProcessor()
    async with Manager(store, gate, policy="interrupt") as manager:
        stream = await manager.create()
        first = asyncio.create_task(stream.process(message("one")))
        await asyncio.wait_for(gate.started.wait(), 30)
        second = asyncio.create_task(stream.process(message("two")))
        with pytest.raises(TurnCancelled):
            await first
        gate.release()
        await asyncio.wait_for(second, 30)
    assert [t.role for t in stream.turns()] == [Role.USER, Role.USER, Role.ASSISTANT]


async def test_double_texting_reject_sends_a_notice_and_stores_nothing(
    store: MemoryStore,
) -> None:
    gate = GatedProcessor()
    async with Manager(store, gate, policy="reject") as manager:
        stream = await manager.create()
        sub = stream.subscribe("notice")
        first = asyncio.create_task(stream.process(message("one")))
        await asyncio.wait_for(gate.started.wait(), 30)
        with pytest.raises(MessageRejected):
            await stream.process(message("two", provenance="slack"))
        notice = (await collect(sub, until=lambda e: True))[0]
        gate.release()
        await first
    assert isinstance(notice, NoticeEvent)
    assert notice.context.provenance == "slack"
    assert [t.role for t in stream.turns()] == [Role.USER, Role.ASSISTANT]


async def test_sinks_hear_every_event_once_whether_or_not_someone_subscribes(
    store: MemoryStore,
) -> None:
    heard: list[Any] = []

    async def sink(thread_id: str, event: Any) -> None:
        heard.append(event)

    async with Manager(store, ScriptedProcessor(["a", "b", "c"])) as manager:
        manager.register_sink((), sink, name="all")
        stream = await manager.create()
        await stream.process(message("unwatched"))
        sub = stream.subscribe("lifecycle")
        await stream.process(message("watched"))
        watched = await collect(sub)
        sub.close()
        await stream.process(message("unwatched again"))
        await stream.emit(NoticeEvent(content="after"))
        for _ in range(100):
            if len(heard) == 3 * len(ECHO_TURN) + 1:
                break
            await asyncio.sleep(0.01)
    assert kinds(heard) == [*ECHO_TURN, *ECHO_TURN, *ECHO_TURN, "notice"]
    assert kinds(watched) == ["lifecycle:submitted", "lifecycle:streaming", "lifecycle:done"]


async def test_an_abandoned_stream_s_turn_publishes_nothing_more_to_sinks_or_subscribers(
    store: MemoryStore,
) -> None:
    heard: list[Any] = []

    async def sink(thread_id: str, event: Any) -> None:
        heard.append(event)

    gate = GatedProcessor()
    async with Manager(store, gate) as manager:
        manager.register_sink((), sink, name="all")
        stream = await manager.create()
        sub = stream.subscribe()
        stream.submit(message("hi"))
        await asyncio.wait_for(gate.started.wait(), 30)
        await stream.abandon()  # another worker owns the thread: its turn is cut short
        stream.publish(NoticeEvent(content="stale"))
        seen = [e async for e in sub]
        await asyncio.sleep(0.05)
    expected = ["turn_complete", "lifecycle:submitted", "lifecycle:streaming", "text_delta"]
    assert kinds(seen) == expected  # no cancelled, no done, no notice
    assert kinds(heard) == expected
