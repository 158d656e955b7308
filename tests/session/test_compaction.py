"""Where compaction cuts a thread and what the compacted branch holds (the ledger side)."""

from __future__ import annotations

import pytest

from ore_core import Role, Text, Thread, ToolCall, ToolResult
from ore_core.errors import OreError
from ore_core.session.compaction import (
    BOUNDARY_INFO_KEY,
    COPY_OF,
    BoundaryInfo,
    estimate_tokens,
    plan_cut,
    store_compaction,
    uncompact,
)


def exchange(thread: Thread, number: int) -> None:
    thread.append(Role.USER, Text(f"question {number}"))
    thread.append(Role.ASSISTANT, Text(f"answer {number}"))


def tool_exchange(thread: Thread) -> None:
    thread.append(Role.USER, Text("add 1 and 2"))
    thread.append(Role.ASSISTANT, ToolCall("call-1", "add", '{"a":1,"b":2}'))
    thread.append(Role.TOOL, ToolResult("call-1", "3"))
    thread.append(Role.ASSISTANT, Text("3"))


def test_a_tool_call_and_its_result_straddling_the_cut_stay_together_in_the_tail() -> None:
    thread = Thread("t")
    for number in range(3):
        exchange(thread, number)
    tool_exchange(thread)
    path = thread.turns()
    cut = plan_cut(path, keep_last=2, pin_first=False)  # the last 2 would start at the result
    assert cut is not None
    assert [turn.role for turn in cut.tail] == [Role.ASSISTANT, Role.TOOL, Role.ASSISTANT]
    assert isinstance(cut.tail[0].artifacts[0], ToolCall)
    assert cut.older == path[:-3]


def test_the_first_exchange_is_pinned_and_the_last_turns_kept() -> None:
    thread = Thread("t")
    thread.append(Role.SYSTEM, Text("You answer in French."))
    for number in range(5):
        exchange(thread, number)
    path = thread.turns()
    cut = plan_cut(path, keep_last=4, pin_first=True)
    assert cut is not None
    assert cut.kept == path[:3]
    assert cut.older == path[3:7]
    assert cut.tail == path[7:]


def test_nothing_is_cut_when_the_kept_turns_are_the_whole_thread() -> None:
    thread = Thread("t")
    for number in range(3):
        exchange(thread, number)
    assert plan_cut(thread.turns(), keep_last=4, pin_first=True) is None


def test_a_second_compaction_summarises_the_first_summary_and_keeps_the_pinned_copies() -> None:
    thread = Thread("t")
    for number in range(6):
        exchange(thread, number)
    first = plan_cut(thread.turns(), keep_last=2, pin_first=True)
    assert first is not None
    summary, _ = store_compaction(thread, first, "first summary", model="m", dropped_tokens=99)
    thread.set_control(summary.id, "stop")
    for number in range(6, 9):
        exchange(thread, number)
    second = plan_cut(thread.turns(), keep_last=2, pin_first=True)
    assert second is not None
    assert second.older[0].id == summary.id
    assert [dict(turn.extra)[COPY_OF] for turn in second.kept] == [turn.id for turn in first.kept]


def test_uncompact_restores_the_old_path_and_copies_what_was_said_since() -> None:
    thread = Thread("t")
    for number in range(6):
        exchange(thread, number)
    before = thread.turns()
    cut = plan_cut(before, keep_last=2, pin_first=False)
    assert cut is not None
    summary, info = store_compaction(thread, cut, "summary", model="m", dropped_tokens=99)
    thread.set_control(summary.id, "stop")
    thread.meta().set(BOUNDARY_INFO_KEY, info.encode())
    exchange(thread, 6)
    assert uncompact(thread) == info
    path = thread.turns()
    assert path[: len(before)] == before
    assert [t.artifacts for t in path[len(before) :]] == [
        (Text("question 6"),),
        (Text("answer 6"),),
    ]
    assert thread.meta().get(BOUNDARY_INFO_KEY) is None


def test_damaged_boundary_info_is_one_clear_error() -> None:
    with pytest.raises(OreError, match=r"^decode boundary info: "):
        BoundaryInfo.decode("{not json")


def test_the_estimate_counts_content_not_ids() -> None:
    thread = Thread("t")
    turn = thread.append(Role.USER, Text("x" * 400))
    assert 100 <= estimate_tokens([turn]) <= 115  # 400 bytes of text, not the turn's id
