"""Bounded subscriber buffers: coalescing, never dropping important events, overflow."""

from __future__ import annotations

import pytest

from ore_core import (
    ArtifactEvent,
    LifecycleEvent,
    OutputEvent,
    SubscriberOverflow,
    Text,
    TextDelta,
    ToolCallDelta,
)
from ore_core.session.fanout import EventBuffer, Subscription, coalesce_deltas


def _subscription(maxsize: int) -> Subscription:
    return Subscription((), lambda _: None, maxsize=maxsize)


def _drain(sub: Subscription) -> list[object]:
    out = []
    while (event := sub.get_nowait()) is not None:
        out.append(event)
    return out


def test_coalesce_concatenates_text_deltas() -> None:
    assert coalesce_deltas(TextDelta("ab"), TextDelta("cd")) == TextDelta("abcd")


def test_coalesce_merges_tool_call_deltas_of_one_index_only() -> None:
    first = ToolCallDelta(index=0, id="c1", name="se", arguments="{")
    second = ToolCallDelta(index=0, id="", name="arch", arguments="}")
    assert coalesce_deltas(first, second) == ToolCallDelta(0, "c1", "search", "{}")
    assert coalesce_deltas(first, ToolCallDelta(index=1)) is None


def test_coalesce_refuses_different_kinds() -> None:
    assert coalesce_deltas(TextDelta("a"), ToolCallDelta(index=0)) is None


def test_full_buffer_merges_deltas_into_the_newest_one() -> None:
    sub = _subscription(maxsize=2)
    for part in ("a", "b", "c", "d"):
        sub.push(ArtifactEvent(artifact=TextDelta(part)))
    events = _drain(sub)
    assert [e.artifact for e in events] == [TextDelta("a"), TextDelta("bcd")]  # type: ignore[attr-defined]


def test_full_buffer_drops_a_delta_it_cannot_merge_but_keeps_lifecycle() -> None:
    sub = _subscription(maxsize=1)
    sub.push(LifecycleEvent(phase="submitted"))
    sub.push(ArtifactEvent(artifact=TextDelta("lost")))
    sub.push(ArtifactEvent(artifact=Text("kept")))
    sub.push(LifecycleEvent(phase="done"))
    events = _drain(sub)
    assert [e.kind for e in events] == ["lifecycle", "text", "lifecycle"]  # type: ignore[attr-defined]
    assert sub.dropped == 1


async def test_a_reader_far_behind_is_cut_off_with_an_error() -> None:
    sub = _subscription(maxsize=1)
    for _ in range(8):
        sub.push(LifecycleEvent(phase="done"))
    sub.push(LifecycleEvent(phase="done"))
    with pytest.raises(SubscriberOverflow):
        await sub.__anext__()


async def test_events_after_close_are_ignored_and_iteration_ends() -> None:
    sub = _subscription(maxsize=4)
    sub.push(LifecycleEvent(phase="done"))
    sub.end()
    sub.push(LifecycleEvent(phase="done"))
    assert [e async for e in sub] == [LifecycleEvent(phase="done")]


def test_take_all_hands_over_every_queued_item_in_order_and_leaves_none() -> None:
    buffer: EventBuffer[tuple[str, LifecycleEvent | None]] = EventBuffer(
        lambda item: item[1], lambda item, event: (item[0], event)
    )
    assert buffer.take_all() == []
    items = [("t1", LifecycleEvent(phase="submitted")), ("t2", None), ("t1", None)]
    buffer.push(items[0])
    buffer.push_mark(items[1])
    buffer.push_mark(items[2])
    assert buffer.take_all() == items
    assert (len(buffer), buffer.take_all(), buffer.appended) == (0, [], 3)


async def test_appended_counts_every_item_ever_queued_whoever_took_it_out() -> None:
    buffer: EventBuffer[tuple[str, OutputEvent | None]] = EventBuffer(
        lambda item: item[1], lambda item, event: (item[0], event), maxsize=2, lossless=True
    )
    done = ("t1", LifecycleEvent(phase="done"))
    buffer.push(done)
    buffer.push_mark(("t1", None))
    assert buffer.appended == 2
    assert await buffer.get() == done
    assert buffer.get_nowait() == ("t1", None)
    assert buffer.get_nowait() is None
    for part in ("a", "b", "c"):  # full at two: the third delta merges into the second
        buffer.push(("t1", ArtifactEvent(artifact=TextDelta(part))))
    buffer.push(done)  # full, lossless: queued all the same
    assert (buffer.appended, buffer.coalesced, len(buffer)) == (5, 1, 3)
    assert len(buffer.take_all()) == 3
    buffer.push(done)
    buffer.close(SubscriberOverflow("gone"))  # discards the queued item: it was queued
    buffer.push(done)  # after close: ignored, not counted
    assert (buffer.appended, len(buffer)) == (6, 0)
