"""Buffer: the linear State of the older `state` package (spec/002)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from ore_core import Role, Text, Thread, Turn
from ore_core.ledger.buffer import Buffer
from ore_core.ledger.clock import FixedClock
from ore_core.ledger.thread import State
from ore_core.ledger.views import prepend, view

T0 = datetime(2024, 1, 1, tzinfo=UTC)
SYSTEM = Turn("sys", Role.SYSTEM, [Text("be brief")])


def test_empty_buffer_has_no_turns() -> None:
    assert Buffer().turns() == []


def test_append_records_role_artifacts_and_the_clock_time() -> None:
    buffer = Buffer(clock=FixedClock(T0))
    buffer.append(Role.USER, Text("hi"))
    [turn] = buffer.turns()
    assert (turn.role, turn.artifacts, turn.timestamp) == (Role.USER, (Text("hi"),), T0)


def test_turns_come_back_in_append_order() -> None:
    buffer = Buffer()
    first = buffer.append(Role.USER, Text("q"))
    second = buffer.append(Role.ASSISTANT, Text("a"))
    assert buffer.turns() == [first, second]


def test_appended_turns_form_one_chain_a_thread_can_load() -> None:
    buffer = Buffer()
    for role in (Role.USER, Role.ASSISTANT, Role.USER):
        buffer.append(role)
    thread = Thread()
    for turn in buffer.turns():
        thread.save_turn(turn)
    thread.set_current_tip(buffer.turns()[-1].id)
    assert thread.turns() == buffer.turns()


def test_the_list_from_turns_is_the_callers_own() -> None:
    buffer = Buffer()
    buffer.append(Role.USER, Text("hi"))
    buffer.turns().clear()
    assert buffer.turns()[0].artifacts == (Text("hi"),)


def test_load_turns_replaces_everything_and_keeps_timestamps() -> None:
    buffer = Buffer(clock=FixedClock(T0 + timedelta(days=1)))
    buffer.append(Role.USER, Text("old"))
    saved = [Turn("u1", Role.USER, [Text("q")], timestamp=T0)]
    buffer.load_turns(saved)
    assert buffer.turns() == saved


def test_load_turns_keeps_its_own_list() -> None:
    buffer = Buffer()
    saved = [Turn("u1", Role.USER, (Text("q"),))]
    buffer.load_turns(saved)
    saved.clear()
    assert buffer.turns()[0].artifacts == (Text("q"),)


def test_append_after_load_continues_from_the_last_loaded_turn() -> None:
    buffer = Buffer()
    buffer.load_turns([Turn("u1", Role.USER), Turn("a1", Role.ASSISTANT, parent_id="u1")])
    assert buffer.append(Role.USER).parent_id == "a1"


def test_append_records_the_event_id() -> None:
    assert Buffer().append(Role.USER, event_id="ev-1").event_id == "ev-1"


def test_meta_handles_share_storage() -> None:
    buffer = Buffer()
    buffer.meta().set("k", "v")
    assert buffer.meta().get("k") == "v"


def test_initial_metadata_is_visible() -> None:
    assert Buffer(metadata={"k": "v"}).meta().all() == {"k": "v"}


def test_len_counts_turns() -> None:
    buffer = Buffer()
    buffer.append(Role.USER)
    buffer.append(Role.ASSISTANT)
    assert len(buffer) == 2


def test_buffer_satisfies_state() -> None:
    state: State = Buffer()
    assert isinstance(state, State)


def test_projections_work_over_a_buffer() -> None:
    buffer = Buffer()
    user = buffer.append(Role.USER, Text("hi"))
    assert prepend(buffer, [SYSTEM]).turns() == [SYSTEM, user]
    view(buffer, [SYSTEM]).append(Role.ASSISTANT, Text("hello"))
    assert len(buffer) == 2
