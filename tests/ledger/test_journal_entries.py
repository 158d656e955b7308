"""Journal entries: their exact shape, and replay (docs/go-compatibility.md, "The journal")."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ore_core import Role, Text, TraversalControl, Turn
from ore_core.jsonutil import dumps, loads
from ore_core.ledger.clock import FixedClock
from ore_core.ledger.entries import Entry, EntryWriter, StampFormatter, replay
from ore_core.ledger.journal import (
    TX_ADD_TURN,
    TX_UPDATE_CONTROL,
    TX_UPDATE_META,
    TX_UPDATE_PARENT,
    TX_UPDATE_TIP,
)
from ore_core.turn import format_timestamp

T0 = datetime(2024, 1, 1, tzinfo=UTC)
STAMP = "2024-01-01T00:00:00Z"

# Journal lines as the Go framework writes them (docs/go-compatibility.md, "The journal").
GO_LINES = [
    b'{"tx_type":"add_turn","timestamp":"2024-01-01T00:00:00Z","payload":{"timestamp":'
    b'"2024-01-01T00:00:00Z","turn":{"id":"u1","role":"user","artifacts":[{"kind":"text",'
    b'"data":{"kind":"text","content":"hi"}}],"timestamp":"2024-01-01T00:00:00Z"}}}',
    b'{"tx_type":"update_tip","timestamp":"2024-01-01T00:00:01.5Z","payload":{"timestamp":'
    b'"2024-01-01T00:00:01.5Z","current_tip":"u1"}}',
    b'{"tx_type":"update_control","timestamp":"2024-01-01T00:00:02Z","payload":{"timestamp":'
    b'"2024-01-01T00:00:02Z","turn_id":"u1","control":"stop"}}',
    b'{"tx_type":"update_parent","timestamp":"2024-01-01T00:00:03Z","payload":{"timestamp":'
    b'"2024-01-01T00:00:03Z","turn_id":"u1","parent_id":""}}',
]


def written(call: Any) -> list[Entry]:
    """The entries one writer call hands to its sink (clock fixed at T0)."""
    calls: list[list[Entry]] = []
    call(EntryWriter(calls.append, FixedClock(T0)))
    assert len(calls) == 1
    return calls[0]


def user_turn(turn_id: str = "u1", text: str = "hi", parent_id: str = "") -> Turn:
    return Turn(turn_id, Role.USER, [Text(text)], parent_id=parent_id, timestamp=T0)


def entry(tx_type: str, **payload: Any) -> Entry:
    return {"tx_type": tx_type, "timestamp": STAMP, "payload": {"timestamp": STAMP, **payload}}


def add(turn: Turn) -> Entry:
    return written(lambda w: w.add_turn(turn))[0]


# -- shapes ------------------------------------------------------------------------------------


def test_add_turn_line_is_the_go_line() -> None:
    assert dumps(add(user_turn())) == GO_LINES[0]


def test_append_writes_add_turn_and_update_tip_as_one_group_of_two() -> None:
    first, second = written(lambda w: w.add_turn(user_turn(), tip="u1"))
    assert first["tx_type"] == TX_ADD_TURN
    assert first["group"] == 2
    assert second == entry(TX_UPDATE_TIP, current_tip="u1")


def test_group_key_follows_the_payload_so_go_fields_come_first() -> None:
    first, _ = written(lambda w: w.add_turn(user_turn(), tip="u1"))
    assert list(first) == ["tx_type", "timestamp", "payload", "group"]


@pytest.mark.parametrize(
    ("call", "expected"),
    [
        (lambda w: w.update_tip("a1"), entry(TX_UPDATE_TIP, current_tip="a1")),
        (
            lambda w: w.update_control("s1", TraversalControl.STOP),
            entry(TX_UPDATE_CONTROL, turn_id="s1", control="stop"),
        ),
        (
            lambda w: w.update_parent("t2", ""),
            entry(TX_UPDATE_PARENT, turn_id="t2", parent_id=""),
        ),
        (
            lambda w: w.update_meta("k", "v"),
            entry(TX_UPDATE_CONTROL, turn_id="", control="", ore_meta={"key": "k", "value": "v"}),
        ),
        (
            lambda w: w.update_meta("k", None),
            entry(
                TX_UPDATE_CONTROL, turn_id="", control="", ore_meta={"key": "k", "deleted": True}
            ),
        ),
    ],
    ids=["update_tip", "update_control", "update_parent", "meta_set", "meta_delete"],
)
def test_update_entries_have_the_documented_payload(call: Any, expected: Entry) -> None:
    assert written(call) == [expected]


def test_every_entry_of_a_call_carries_one_clock_reading() -> None:
    clock = FixedClock(T0, step=timedelta(milliseconds=250))
    calls: list[list[Entry]] = []
    writer = EntryWriter(calls.append, clock)
    writer.add_turn(user_turn(), tip="u1")
    writer.update_tip("u1")
    stamps = [
        {e["timestamp"] for e in call} | {e["payload"]["timestamp"] for e in call} for call in calls
    ]
    assert stamps == [{"2024-01-01T00:00:00Z"}, {"2024-01-01T00:00:00.25Z"}]


# -- replay ---------------------------------------------------------------------------------------


def test_go_lines_replay_to_the_go_state() -> None:
    state = replay(loads(line) for line in GO_LINES)
    assert state.tip == "u1"
    expected = dataclasses.replace(user_turn(), control=TraversalControl.STOP)
    assert state.turns == {"u1": expected}
    assert state.turns["u1"].control is TraversalControl.STOP
    assert (state.entries, state.problem) == (4, None)


def test_replaying_nothing_gives_an_empty_state() -> None:
    state = replay([])
    assert (state.turns, state.tip, state.meta, state.problem) == ({}, "", {}, None)


def test_add_turn_of_a_known_id_replaces_the_turn() -> None:
    state = replay([add(user_turn(text="first")), add(user_turn(text="second"))])
    assert state.turns["u1"].artifacts == (Text("second"),)


def test_add_turn_does_not_move_the_tip() -> None:
    assert replay([add(user_turn())]).tip == ""


def test_update_tip_sets_the_tip_verbatim() -> None:
    assert replay([entry(TX_UPDATE_TIP, current_tip="nowhere")]).tip == "nowhere"


def test_control_and_parent_updates_of_unknown_turns_change_nothing() -> None:
    state = replay(
        [
            entry(TX_UPDATE_CONTROL, turn_id="ghost", control="stop"),
            entry(TX_UPDATE_PARENT, turn_id="ghost", parent_id="u1"),
        ]
    )
    assert (state.turns, state.entries, state.problem) == ({}, 2, None)


def test_update_parent_relinks_a_known_turn() -> None:
    state = replay([add(user_turn(parent_id="a0")), entry(TX_UPDATE_PARENT, turn_id="u1")])
    assert state.turns["u1"].parent_id == ""


def test_meta_entries_set_and_delete_keys() -> None:
    state = replay(
        [
            entry(TX_UPDATE_META, key="a", value="1"),
            entry(TX_UPDATE_META, key="b", value="2"),
            entry(TX_UPDATE_META, key="a", deleted=True),
        ]
    )
    assert state.meta == {"b": "2"}


def test_unknown_tx_type_stops_replay_and_keeps_what_came_before() -> None:
    state = replay(
        [add(user_turn()), entry("rename_thread", name="x"), entry(TX_UPDATE_TIP, current_tip="u1")]
    )
    assert list(state.turns) == ["u1"]
    assert state.tip == ""
    assert state.problem is not None
    assert "entry 2" in state.problem
    assert "rename_thread" in state.problem


@pytest.mark.parametrize(
    "bad",
    [
        {"tx_type": TX_UPDATE_TIP, "timestamp": STAMP, "payload": "u1"},
        entry(TX_UPDATE_TIP, current_tip=7),
        entry(TX_ADD_TURN),
        entry(TX_ADD_TURN, turn={"id": "u2", "role": "user", "artifacts": [{"kind": 3}]}),
        entry(TX_ADD_TURN, turn={"id": "u2", "role": "user", "timestamp": "yesterday"}),
        entry(TX_UPDATE_META, key="k"),
        ["not", "an", "object"],
        {**entry(TX_UPDATE_TIP, current_tip="u1"), "group": 0},
    ],
    ids=[
        "payload-not-object",
        "tip-not-string",
        "no-turn",
        "bad-artifact",
        "bad-timestamp",
        "meta-without-value",
        "entry-not-object",
        "bad-group",
    ],
)
def test_undecodable_entry_stops_replay_without_raising(bad: Any) -> None:
    state = replay([add(user_turn()), bad, entry(TX_UPDATE_TIP, current_tip="u1")])
    assert list(state.turns) == ["u1"]
    assert state.tip == ""
    assert state.entries == 1
    assert state.problem is not None
    assert state.problem.startswith("entry 2:")


def test_a_complete_group_is_applied() -> None:
    state = replay(written(lambda w: w.add_turn(user_turn(), tip="u1")))
    assert (list(state.turns), state.tip, state.entries) == (["u1"], "u1", 2)


def test_a_group_cut_short_by_the_end_is_not_applied() -> None:
    first, _ = written(lambda w: w.add_turn(user_turn(), tip="u1"))
    state = replay([first])
    assert (state.turns, state.tip, state.entries) == ({}, "", 0)
    assert state.problem is not None
    assert "incomplete" in state.problem


def test_a_group_cut_short_by_a_bad_entry_is_not_applied() -> None:
    first, _ = written(lambda w: w.add_turn(user_turn(), tip="u1"))
    state = replay([first, entry("bogus")])
    assert (state.turns, state.tip) == ({}, "")
    assert state.problem is not None


def test_a_group_inside_a_group_is_refused() -> None:
    first, _ = written(lambda w: w.add_turn(user_turn(), tip="u1"))
    state = replay([first, first])
    assert state.turns == {}
    assert state.problem is not None
    assert "inside" in state.problem


def test_replayed_turns_are_new_values_equal_to_the_written_ones() -> None:
    turn = Turn("a1", Role.ASSISTANT, [Text("x")], parent_id="u1", timestamp=T0, event_id="e1")
    replayed = replay([add(turn)]).turns["a1"]
    assert replayed == turn
    assert replayed.artifacts[0] is not turn.artifacts[0]


# -- timestamps ---------------------------------------------------------------------------------

ZONES = st.sampled_from(
    [UTC, timezone(timedelta(hours=2)), timezone(timedelta(hours=-5, minutes=-30))]
)
READINGS = st.one_of(
    st.datetimes(timezones=ZONES),
    st.datetimes(),
    # readings that share a second, as a busy writer produces them
    st.integers(0, 999_999).map(lambda micro: T0.replace(microsecond=micro)),
)


@given(st.lists(READINGS, min_size=1, max_size=20))
def test_stamp_formatter_agrees_with_format_timestamp(readings: list[datetime]) -> None:
    formatter = StampFormatter()
    assert [formatter.format(r) for r in readings] == [format_timestamp(r) for r in readings]


@pytest.mark.parametrize(
    "turn",
    [
        user_turn(),
        dataclasses.replace(user_turn("a2", "yo", parent_id="u1"), event_id="e1"),
        Turn("s1", Role.ASSISTANT, [Text("sum")], control=TraversalControl.STOP),
        Turn("n1", Role.TOOL),
    ],
)
@pytest.mark.parametrize("tip", [None, "u1"])
def test_a_writer_for_a_serialising_sink_writes_the_same_bytes(turn: Turn, tip: str | None) -> None:
    # encoded_turns embeds the turn's cached JSON (orjson.Fragment) instead of its dict.
    encoded: list[list[Entry]] = []
    EntryWriter(encoded.append, FixedClock(T0), encoded_turns=True).add_turn(turn, tip)
    plain = written(lambda w: w.add_turn(turn, tip))
    assert [dumps(e) for e in encoded[0]] == [dumps(e) for e in plain]


def test_a_writer_for_a_serialising_sink_writes_the_go_line() -> None:
    encoded: list[list[Entry]] = []
    EntryWriter(encoded.append, FixedClock(T0), encoded_turns=True).add_turn(user_turn())
    assert dumps(encoded[0][0]) == GO_LINES[0]
