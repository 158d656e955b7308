"""Thread: the conversation tree (docs/go-compatibility.md: the thread tree, defect 1)."""

from __future__ import annotations

import dataclasses
import gc
import sys
import weakref
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from types import FrameType
from typing import Any, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs

from ore_core import LedgerError, Role, Text, Thread, TraversalControl, Turn, TurnNotFound
from ore_core.ledger.clock import ClockFunc, FixedClock
from ore_core.ledger.journal import JournalState, Repository
from ore_core.ledger.repository import MemoryRepository
from ore_core.ledger.thread import State

T0 = datetime(2024, 1, 1, tzinfo=UTC)


def chain(*turn_ids: str, controls: dict[str, str] | None = None) -> Thread:
    """A thread holding one chain of turns, tip at the end; ids starting with "u" are users."""
    thread = Thread("thread-1")
    parent = ""
    for turn_id in turn_ids:
        role = Role.USER if turn_id.startswith("u") else Role.ASSISTANT
        control = (controls or {}).get(turn_id, "")
        thread.save_turn(Turn(turn_id, role, [Text(turn_id)], parent_id=parent, control=control))
        parent = turn_id
    thread.set_current_tip(parent)
    return thread


def ids(turns: list[Turn]) -> list[str]:
    return [turn.id for turn in turns]


class RecordingWriter:
    """JournalWriter test double: records each call as a tuple."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def add_turn(self, turn: Turn, tip: str | None = None) -> None:
        self.calls.append(("add_turn", turn.id, tip))

    def update_tip(self, tip: str) -> None:
        self.calls.append(("update_tip", tip))

    def update_control(self, turn_id: str, control: str) -> None:
        self.calls.append(("update_control", turn_id, control))

    def update_parent(self, turn_id: str, parent_id: str) -> None:
        self.calls.append(("update_parent", turn_id, parent_id))

    def update_meta(self, key: str, value: str | None) -> None:
        self.calls.append(("update_meta", key, value))


class FailingWriter:
    """JournalWriter test double whose storage is broken."""

    def add_turn(self, turn: Turn, tip: str | None = None) -> None:
        raise OSError("disk full")

    def update_tip(self, tip: str) -> None:
        raise OSError("disk full")

    def update_control(self, turn_id: str, control: str) -> None:
        raise OSError("disk full")

    def update_parent(self, turn_id: str, parent_id: str) -> None:
        raise OSError("disk full")

    def update_meta(self, key: str, value: str | None) -> None:
        raise OSError("disk full")


class ReplayRepository:
    """The two Repository methods `Thread.from_journal` uses, serving a fixed JournalState."""

    def __init__(self, state: JournalState) -> None:
        self.state = state
        self.hydrated: list[str] = []
        self.writers: dict[str, RecordingWriter] = {}

    def hydrate(self, thread_id: str) -> JournalState:
        self.hydrated.append(thread_id)
        return self.state

    def writer(self, thread_id: str) -> RecordingWriter:
        return self.writers.setdefault(thread_id, RecordingWriter())


def replay(state: JournalState) -> tuple[ReplayRepository, Repository]:
    repository = ReplayRepository(state)
    return repository, cast(Repository, repository)


# -- 2.6 acceptance: building the tree --------------------------------------------------------


def test_empty_thread_has_no_turns_and_empty_tip() -> None:
    thread = Thread()
    assert thread.turns() == []
    assert thread.current_tip == ""
    assert len(thread) == 0


def test_append_sets_role_and_content_and_moves_tip_to_the_new_turn() -> None:
    thread = Thread()
    turn = thread.append(Role.USER, Text("hello"))
    assert (turn.role, turn.artifacts) == (Role.USER, (Text("hello"),))
    assert thread.current_tip == turn.id
    assert thread.get_turn(turn.id) == turn


def test_appended_turns_chain_each_parent_to_the_previous_tip() -> None:
    thread = Thread()
    u1 = thread.append(Role.USER, Text("q"))
    a1 = thread.append(Role.ASSISTANT, Text("a"))
    u2 = thread.append(Role.USER, Text("q2"))
    assert (a1.parent_id, u2.parent_id) == (u1.id, a1.id)
    assert ids(thread.turns()) == [u1.id, a1.id, u2.id]


def test_root_turn_has_empty_parent() -> None:
    assert Thread().append(Role.USER).parent_id == ""


def test_new_turn_control_defaults_to_empty_not_continue() -> None:
    assert Thread().append(Role.USER).control == ""


def test_custom_clock_stamps_the_timestamp() -> None:
    thread = Thread(clock=ClockFunc(lambda: T0))
    assert thread.append(Role.USER).timestamp == T0


def test_stepping_clock_gives_each_appended_turn_a_later_timestamp() -> None:
    thread = Thread(clock=FixedClock(T0, step=timedelta(seconds=1)))
    first, second = thread.append(Role.USER), thread.append(Role.ASSISTANT)
    assert (first.timestamp, second.timestamp) == (T0, T0 + timedelta(seconds=1))


def test_default_clock_stamps_utc_times() -> None:
    stamp = Thread().append(Role.USER).timestamp
    assert stamp is not None
    assert stamp.utcoffset() == timedelta(0)


def test_append_records_the_event_id() -> None:
    assert Thread().append(Role.USER, event_id="ev-1").event_id == "ev-1"


def test_save_turn_does_not_move_the_tip() -> None:
    thread = chain("u1", "a1")
    thread.save_turn(Turn("u2", Role.USER, parent_id="a1"))
    assert thread.current_tip == "a1"
    assert thread.get_turn("u2") is not None


def test_save_turn_replaces_the_turn_with_the_same_id() -> None:
    thread = chain("u1")
    thread.save_turn(Turn("u1", Role.USER, [Text("edited")]))
    assert thread.get_turn("u1") == Turn("u1", Role.USER, [Text("edited")])
    assert len(thread) == 1


def test_set_current_tip_takes_an_unknown_id_verbatim_and_the_path_is_empty() -> None:
    thread = chain("u1", "a1")
    thread.set_current_tip("nowhere")
    assert thread.current_tip == "nowhere"
    assert thread.turns() == []


def test_all_turns_holds_every_branch() -> None:
    thread = chain("u1", "a1")
    thread.save_turn(Turn("a1-alt", Role.ASSISTANT, parent_id="u1"))
    assert sorted(ids(thread.all_turns())) == ["a1", "a1-alt", "u1"]


def test_len_counts_stored_turns_on_every_branch() -> None:
    thread = chain("u1", "a1")
    thread.save_turn(Turn("a1-alt", Role.ASSISTANT, parent_id="u1"))
    assert len(thread) == 3


def test_get_turn_of_unknown_id_is_none() -> None:
    assert chain("u1").get_turn("missing") is None


def test_thread_satisfies_state() -> None:
    state: State = Thread()
    assert isinstance(state, State)


# -- 2.6 acceptance: the active-path walk ------------------------------------------------------


def test_switching_tip_to_a_sibling_branch_resolves_that_branch() -> None:
    thread = chain("u1", "a1", "u2", "a2")
    thread.save_turn(Turn("a1-alt", Role.ASSISTANT, parent_id="a1"))
    thread.save_turn(Turn("u2-alt", Role.USER, parent_id="a1-alt"))
    thread.set_current_tip("u2-alt")
    assert ids(thread.turns()) == ["u1", "a1", "a1-alt", "u2-alt"]


def test_switching_tip_back_restores_the_original_branch() -> None:
    thread = chain("u1", "a1", "u2", "a2")
    thread.save_turn(Turn("a1-alt", Role.ASSISTANT, parent_id="a1"))
    thread.set_current_tip("a1-alt")
    thread.set_current_tip("a2")
    assert ids(thread.turns()) == ["u1", "a1", "u2", "a2"]


def test_stop_turn_is_included_and_ends_the_walk() -> None:
    thread = chain("u1", "a1", "u2", "summary", "u3", "a3", controls={"summary": "stop"})
    assert ids(thread.turns()) == ["summary", "u3", "a3"]
    assert thread.get_turn("u1") is not None


def test_skip_turn_is_hidden_but_its_parent_is_kept() -> None:
    thread = chain("u1", "a1", "tool", "a2", controls={"tool": "skip"})
    assert ids(thread.turns()) == ["u1", "a1", "a2"]
    assert thread.get_turn("tool") is not None


def test_skipped_tip_above_a_stop_turn_resolves_to_the_stop_turn_alone() -> None:
    thread = chain("u1", "summary", "tool", controls={"summary": "stop", "tool": "skip"})
    assert ids(thread.turns()) == ["summary"]


def test_stop_turn_ends_the_walk_before_its_skipped_parent() -> None:
    thread = chain("u1", "hidden", "summary", controls={"hidden": "skip", "summary": "stop"})
    assert ids(thread.turns()) == ["summary"]


def test_continue_control_behaves_like_empty() -> None:
    thread = chain("u1", "a1", controls={"a1": "continue"})
    assert ids(thread.turns()) == ["u1", "a1"]


def test_broken_parent_id_leaves_only_the_tip() -> None:
    thread = Thread()
    thread.save_turn(Turn("a1", Role.ASSISTANT, parent_id="gone"))
    thread.set_current_tip("a1")
    assert ids(thread.turns()) == ["a1"]


def test_reparenting_to_a_missing_turn_ends_the_walk_there() -> None:
    thread = chain("u1", "a1", "u2", "a2")
    thread.set_parent("u2", "gone")
    assert ids(thread.turns()) == ["u2", "a2"]


def test_set_parent_to_empty_makes_a_root_and_orphans_the_old_parent() -> None:
    thread = chain("u1", "a1", "u2")
    thread.set_parent("u2", "")
    assert ids(thread.turns()) == ["u2"]
    assert thread.get_turn("a1") is not None


def test_set_control_skip_hides_the_tip() -> None:
    thread = chain("u1", "a1")
    thread.set_control("a1", TraversalControl.SKIP)
    assert ids(thread.turns()) == ["u1"]


def test_set_control_on_unknown_turn_is_a_no_op() -> None:
    thread = chain("u1")
    thread.set_control("missing", "stop")
    assert ids(thread.all_turns()) == ["u1"]


def test_set_parent_on_unknown_turn_is_a_no_op() -> None:
    thread = chain("u1")
    thread.set_parent("missing", "u1")
    assert ids(thread.all_turns()) == ["u1"]


def test_set_control_refuses_an_unknown_control_value() -> None:
    thread = chain("u1")
    with pytest.raises(LedgerError, match=r"'stopp'.*thread-1"):
        thread.set_control("u1", "stopp")


# -- cycles (17.5: the Go walk hangs on a parent loop) -----------------------------------------


@pytest.mark.timeout(5)
def test_parent_loop_ends_the_walk_at_the_first_revisited_turn() -> None:
    thread = chain("u1", "a1", "u2")
    thread.set_parent("u1", "u2")
    with capture_logs():
        assert ids(thread.turns()) == ["u1", "a1", "u2"]


@pytest.mark.timeout(5)
def test_parent_loop_logs_one_warning_naming_thread_and_turn() -> None:
    thread = chain("u1", "a1", "u2")
    thread.set_parent("u1", "u2")
    with capture_logs() as logs:
        thread.turns()
    assert [(log["log_level"], log["thread_id"], log["turn_id"]) for log in logs] == [
        ("warning", "thread-1", "u2")
    ]


@pytest.mark.timeout(5)
def test_turn_that_is_its_own_parent_resolves_to_itself() -> None:
    thread = chain("u1", "a1")
    thread.set_parent("a1", "a1")
    with capture_logs():
        assert ids(thread.turns()) == ["a1"]


@pytest.mark.timeout(5)
def test_loop_of_skipped_turns_resolves_to_nothing() -> None:
    thread = chain("x1", "x2", controls={"x1": "skip", "x2": "skip"})
    thread.set_parent("x1", "x2")
    with capture_logs():
        assert thread.turns() == []


def traced_lines(action: Callable[[], object]) -> int:
    """How many Python lines `action` executes: work counted, not timed, so load can't skew it."""
    count = 0

    def trace(frame: FrameType, event: str, arg: object) -> Any:
        nonlocal count
        if event == "line":
            count += 1
        return trace

    sys.settrace(trace)
    try:
        action()
    finally:
        sys.settrace(None)
    return count


def chain_of(length: int) -> Thread:
    thread = Thread(clock=FixedClock(T0))
    for _ in range(length):
        thread.append(Role.USER)
    return thread


@pytest.mark.timeout(60)
def test_deep_thread_resolves_in_linear_time() -> None:
    deep = chain_of(100_000)
    assert len(deep.resolve_active_path()) == 100_000  # no recursion limit, no loop
    # Linear: four times the turns cost at most four times the work (quadratic: sixteen).
    small, large = chain_of(1_000), chain_of(4_000)
    small_work = traced_lines(small.resolve_active_path)
    large_work = traced_lines(large.resolve_active_path)
    assert small_work >= 1_000  # the walk really was traced: at least a line per turn
    assert large_work <= 4 * small_work + 50


# -- fork, branches, undo ----------------------------------------------------------------------


def test_fork_moves_the_tip_so_the_next_append_starts_a_branch() -> None:
    thread = chain("u1", "a1", "u2", "a2")
    thread.fork("a1")
    branch = thread.append(Role.USER, Text("instead"))
    assert branch.parent_id == "a1"
    assert ids(thread.turns()) == ["u1", "a1", branch.id]
    assert thread.get_turn("a2") is not None


def test_fork_at_no_turn_makes_the_next_append_a_new_root() -> None:
    thread = chain("u1", "a1")
    thread.fork("")
    root = thread.append(Role.USER, Text("instead"))
    assert root.parent_id == ""
    assert ids(thread.turns()) == [root.id]
    assert thread.get_turn("a1") is not None


def test_fork_at_an_unknown_turn_raises_turn_not_found_and_keeps_the_tip() -> None:
    thread = chain("u1", "a1")
    with pytest.raises(TurnNotFound, match=r"thread-1.*'missing'"):
        thread.fork("missing")
    assert thread.current_tip == "a1"


def test_branches_are_the_leaves_oldest_first() -> None:
    thread = Thread(clock=FixedClock(T0, step=timedelta(seconds=1)))
    u1 = thread.append(Role.USER)
    a1 = thread.append(Role.ASSISTANT)
    thread.fork(u1.id)
    a1_alt = thread.append(Role.ASSISTANT)
    assert ids(thread.branches()) == [a1.id, a1_alt.id]


def test_branches_with_equal_timestamps_are_ordered_by_id() -> None:
    thread = Thread()
    for turn_id in ("b", "root", "a"):
        parent = "" if turn_id == "root" else "root"
        thread.save_turn(Turn(turn_id, Role.ASSISTANT, parent_id=parent, timestamp=T0))
    assert ids(thread.branches()) == ["a", "b"]


def test_turn_that_is_its_own_parent_is_still_a_leaf() -> None:
    thread = chain("u1")
    thread.set_parent("u1", "u1")
    assert ids(thread.branches()) == ["u1"]


def test_undo_moves_the_tip_to_the_parent_of_the_latest_user_turn() -> None:
    thread = chain("u1", "a1", "u2", "tool", "a2")
    assert thread.undo() == "a1"
    assert ids(thread.turns()) == ["u1", "a1"]


def test_undone_turns_stay_stored() -> None:
    thread = chain("u1", "a1", "u2", "a2")
    thread.undo()
    assert sorted(ids(thread.all_turns())) == ["a1", "a2", "u1", "u2"]


def test_undo_of_the_first_exchange_empties_the_active_path() -> None:
    thread = chain("u1", "a1")
    assert thread.undo() == ""
    assert thread.turns() == []


def test_undo_ignores_user_turns_hidden_from_the_active_path() -> None:
    thread = chain("u1", "a1", "u2", "a2", controls={"u2": "skip"})
    assert thread.undo() == ""


def test_undo_without_a_user_turn_keeps_the_tip() -> None:
    thread = chain("system", "a1")
    assert thread.undo() == "a1"
    assert thread.current_tip == "a1"


# -- has_event -------------------------------------------------------------------------------


def test_has_event_is_true_once_a_turn_records_it() -> None:
    thread = Thread()
    thread.append(Role.USER, event_id="ev-1")
    assert thread.has_event("ev-1")


def test_has_event_is_false_for_unknown_and_empty_ids() -> None:
    thread = Thread()
    thread.append(Role.USER)
    assert not thread.has_event("ev-1")
    assert not thread.has_event("")


def test_saved_turn_records_its_event_id() -> None:
    thread = Thread()
    thread.save_turn(Turn("u1", Role.USER, event_id="ev-1"))
    assert thread.has_event("ev-1")


def test_replacing_a_turn_forgets_its_old_event_id() -> None:
    thread = Thread()
    thread.save_turn(Turn("u1", Role.USER, event_id="ev-1"))
    thread.save_turn(Turn("u1", Role.USER, event_id="ev-2"))
    assert (thread.has_event("ev-1"), thread.has_event("ev-2")) == (False, True)


def test_event_stays_known_while_another_turn_records_it() -> None:
    thread = Thread()
    thread.save_turn(Turn("u1", Role.USER, event_id="ev-1"))
    thread.save_turn(Turn("a1", Role.ASSISTANT, parent_id="u1", event_id="ev-1"))
    thread.save_turn(Turn("u1", Role.USER))
    assert thread.has_event("ev-1")


# -- immutability ----------------------------------------------------------------------------


def test_turns_are_immutable_so_readers_cannot_change_the_thread() -> None:
    thread = chain("u1")
    turn = thread.turns()[0]
    with pytest.raises(dataclasses.FrozenInstanceError):
        turn.control = TraversalControl.SKIP  # type: ignore[misc]
    assert isinstance(turn.artifacts, tuple)
    assert thread.turns() == [Turn("u1", Role.USER, (Text("u1"),))]


def test_the_list_from_turns_is_the_callers_own() -> None:
    thread = chain("u1", "a1")
    path = thread.turns()
    path.clear()
    assert [t.id for t in thread.turns()] == ["u1", "a1"]


def test_a_turn_built_with_a_list_stores_a_tuple() -> None:
    artifacts = [Text("hi")]
    turn = Turn("u1", Role.USER, artifacts)  # type: ignore[arg-type]
    artifacts.clear()
    assert turn.artifacts == (Text("hi"),)


def test_set_control_replaces_the_turn_and_leaves_earlier_readers_untouched() -> None:
    thread = chain("u1")
    before = thread.get_turn("u1")
    thread.set_control("u1", TraversalControl.STOP)
    assert before is not None
    assert before.control == TraversalControl.DEFAULT
    assert thread.get_turn("u1") == dataclasses.replace(before, control=TraversalControl.STOP)


# -- journal binding -------------------------------------------------------------------------


def test_bound_append_journals_one_add_turn_carrying_the_new_tip() -> None:
    writer = RecordingWriter()
    thread = Thread(journal=writer)
    turn = thread.append(Role.USER)
    assert writer.calls == [("add_turn", turn.id, turn.id)]


def test_bound_save_turn_journals_add_turn_without_a_tip() -> None:
    writer = RecordingWriter()
    Thread(journal=writer).save_turn(Turn("u1", Role.USER))
    assert writer.calls == [("add_turn", "u1", None)]


def test_bound_set_current_tip_journals_update_tip() -> None:
    writer = RecordingWriter()
    Thread(journal=writer).set_current_tip("u1")
    assert writer.calls == [("update_tip", "u1")]


def test_bound_set_control_journals_update_control() -> None:
    thread, writer = chain("u1"), RecordingWriter()
    thread.bind(writer)
    thread.set_control("u1", "stop")
    assert writer.calls == [("update_control", "u1", "stop")]


def test_bound_set_parent_journals_update_parent() -> None:
    thread, writer = chain("u1", "a1"), RecordingWriter()
    thread.bind(writer)
    thread.set_parent("a1", "")
    assert writer.calls == [("update_parent", "a1", "")]


def test_control_and_parent_changes_to_unknown_turns_journal_nothing() -> None:
    writer = RecordingWriter()
    thread = Thread(journal=writer)
    thread.set_control("missing", "stop")
    thread.set_parent("missing", "")
    assert writer.calls == []


def test_fork_and_undo_journal_update_tip() -> None:
    thread, writer = chain("u1", "a1", "u2", "a2"), RecordingWriter()
    thread.bind(writer)
    thread.fork("u2")
    thread.undo()
    assert writer.calls == [("update_tip", "u2"), ("update_tip", "a1")]


def test_meta_set_and_delete_journal_update_meta() -> None:
    writer = RecordingWriter()
    meta = Thread(journal=writer).meta()
    meta.set("k", "v")
    meta.delete("k")
    assert writer.calls == [("update_meta", "k", "v"), ("update_meta", "k", None)]


def test_initial_metadata_is_not_journaled() -> None:
    writer = RecordingWriter()
    thread = Thread(journal=writer, metadata={"k": "v"})
    assert thread.meta().all() == {"k": "v"}
    assert writer.calls == []


def test_unbinding_stops_journaling() -> None:
    writer = RecordingWriter()
    thread = Thread(journal=writer)
    thread.bind(None)
    thread.append(Role.USER)
    thread.meta().set("k", "v")
    assert writer.calls == []


def test_binding_later_journals_metadata_through_the_new_writer() -> None:
    thread, first, second = Thread(), RecordingWriter(), RecordingWriter()
    meta = thread.meta()  # a handle taken before any binding still journals
    thread.bind(first)
    meta.set("k", "v")
    thread.bind(second)
    meta.delete("k")
    assert (first.calls, second.calls) == (
        [("update_meta", "k", "v")],
        [("update_meta", "k", None)],
    )


def test_a_dropped_thread_is_freed_at_once_not_left_to_the_cycle_collector() -> None:
    """A closed stream's thread, with every turn it holds, is freed by reference counting:
    a reference cycle would keep it until the collector's next full pass, which a serving
    core runs rarely (`SERVING_GC_THRESHOLD`)."""
    thread = chain("u1", "a1")
    thread.bind(RecordingWriter())
    thread.meta().set("k", "v")
    gone = weakref.ref(thread)
    gc.disable()
    try:
        del thread
        assert gone() is None
    finally:
        gc.enable()


def test_failing_writer_leaves_the_thread_unchanged() -> None:
    thread = chain("u1", "a1")
    thread.bind(FailingWriter())
    for change in (
        lambda: thread.append(Role.USER, event_id="ev-1"),
        lambda: thread.save_turn(Turn("x", Role.USER)),
        lambda: thread.set_current_tip("u1"),
        lambda: thread.set_parent("a1", ""),
        lambda: thread.set_control("a1", "skip"),
        lambda: thread.meta().set("k", "v"),
    ):
        with pytest.raises(OSError, match="disk full"):
            change()
    assert ids(thread.turns()) == ["u1", "a1"]
    assert (len(thread), thread.has_event("ev-1"), thread.meta().all()) == (2, False, {})


def test_from_journal_rebuilds_turns_tip_and_meta() -> None:
    turns = {t.id: t for t in chain("u1", "a1", "u2").all_turns()}
    _, repository = replay(JournalState(turns=turns, tip="a1", meta={"k": "v"}))
    thread = Thread.from_journal(repository, "thread-1")
    assert (thread.id, ids(thread.turns()), len(thread)) == ("thread-1", ["u1", "a1"], 3)
    assert thread.meta().all() == {"k": "v"}


def test_from_journal_does_not_journal_the_replay_and_binds_the_writer() -> None:
    turns = {t.id: t for t in chain("u1", "a1").all_turns()}
    stub, repository = replay(JournalState(turns=turns, tip="a1", meta={"k": "v"}))
    thread = Thread.from_journal(repository, "thread-1")
    assert stub.hydrated == ["thread-1"]
    assert stub.writers["thread-1"].calls == []
    thread.set_current_tip("u1")
    assert stub.writers["thread-1"].calls == [("update_tip", "u1")]


def test_from_journal_without_bind_leaves_the_thread_unbound() -> None:
    stub, repository = replay(JournalState())
    thread = Thread.from_journal(repository, "thread-1", bind=False)
    thread.append(Role.USER)
    assert stub.writers == {}


def test_from_journal_warns_when_replay_stopped_early() -> None:
    _, repository = replay(JournalState(entries=3, problem="line 4: not JSON"))
    with capture_logs() as logs:
        Thread.from_journal(repository, "thread-1")
    assert [(log["thread_id"], log["problem"]) for log in logs] == [
        ("thread-1", "line 4: not JSON")
    ]


def test_from_journal_uses_the_given_clock_for_new_turns() -> None:
    _, repository = replay(JournalState())
    thread = Thread.from_journal(repository, "thread-1", clock=ClockFunc(lambda: T0))
    assert thread.append(Role.USER).timestamp == T0


def test_thread_bound_to_a_memory_repository_rebuilds_identically() -> None:
    repository = MemoryRepository()
    thread = Thread("thread-1", journal=repository.writer("thread-1"))
    user = thread.append(Role.USER, Text("hi"), event_id="ev-1")
    answer = thread.append(Role.ASSISTANT, Text("hello"))
    thread.set_control(answer.id, "stop")
    thread.meta().set("k", "v")
    thread.fork(user.id)
    thread.append(Role.ASSISTANT, Text("hello again"))
    entries = len(repository.journal("thread-1"))
    rebuilt = Thread.from_journal(repository, "thread-1")
    assert rebuilt.all_turns() == thread.all_turns()
    assert (rebuilt.current_tip, rebuilt.meta().all()) == (thread.current_tip, {"k": "v"})
    assert rebuilt.has_event("ev-1")
    assert len(repository.journal("thread-1")) == entries


# -- property: the walk matches a plain reference walk on any tree ---------------------------

CONTROLS = st.sampled_from(["", "continue", "stop", "skip"])


def reference_walk(parents: dict[str, str], controls: dict[str, str], tip: str) -> list[str]:
    """The seed's walk, plus: stop at a turn already visited."""
    path: list[str] = []
    visited: set[str] = set()
    current = tip
    while current in parents and current not in visited:
        visited.add(current)
        if controls[current] != "skip":
            path.insert(0, current)
        if controls[current] == "stop":
            break
        current = parents[current]
    return path


@st.composite
def trees(draw: st.DrawFn) -> tuple[dict[str, str], dict[str, str], str]:
    size = draw(st.integers(min_value=0, max_value=25))
    names = [f"t{i}" for i in range(size)]
    # Any parent at all: root, missing, self, earlier or later turns (loops included).
    targets = st.sampled_from([*names, "", "missing"])
    parents = {name: draw(targets) for name in names}
    controls = {name: draw(CONTROLS) for name in names}
    tip = draw(targets)
    return parents, controls, tip


def thread_of(tree: tuple[dict[str, str], dict[str, str], str]) -> Thread:
    """The thread `tree` describes (parents, controls, tip): every turn saved, its tip set."""
    parents, controls, tip = tree
    thread = Thread("prop")
    for name in parents:
        thread.save_turn(Turn(name, Role.USER, parent_id=parents[name], control=controls[name]))
    thread.set_current_tip(tip)
    return thread


@pytest.mark.timeout(60)
@settings(max_examples=300, deadline=None)
@given(trees())
def test_active_path_matches_the_reference_walk_on_random_trees(
    tree: tuple[dict[str, str], dict[str, str], str],
) -> None:
    parents, controls, tip = tree
    thread = thread_of(tree)
    with capture_logs():
        assert ids(thread.turns()) == reference_walk(parents, controls, tip)


@pytest.mark.timeout(60)
@settings(max_examples=200, deadline=None)
@given(trees(), st.data())
def test_reparenting_and_control_changes_keep_matching_the_reference_walk(
    tree: tuple[dict[str, str], dict[str, str], str], data: st.DataObject
) -> None:
    parents, controls, tip = tree
    thread = thread_of(tree)
    if parents:
        names = st.sampled_from(sorted(parents))
        for _ in range(data.draw(st.integers(min_value=1, max_value=10))):
            name = data.draw(names)
            if data.draw(st.booleans()):
                parents[name] = data.draw(st.sampled_from([*parents, "", "missing"]))
                thread.set_parent(name, parents[name])
            else:
                controls[name] = data.draw(CONTROLS)
                thread.set_control(name, controls[name])
    with capture_logs():
        assert ids(thread.turns()) == reference_walk(parents, controls, tip)
