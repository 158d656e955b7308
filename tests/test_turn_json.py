"""Turn JSON matches the Go framework's files (ore-behaviour.md 2.2)."""

from datetime import UTC, datetime

from ore_core import Role, Text, TraversalControl, Turn
from ore_core.jsonutil import dumps, loads
from ore_core.ledger import turn_from_dict, turn_to_dict


def test_user_turn_json_matches_go_example() -> None:
    turn = Turn("turn-1", Role.USER, [Text("hello")], timestamp=datetime(2024, 1, 1, tzinfo=UTC))
    assert dumps(turn_to_dict(turn)) == (
        b'{"id":"turn-1","role":"user","artifacts":[{"kind":"text","data":'
        b'{"kind":"text","content":"hello"}}],"timestamp":"2024-01-01T00:00:00Z"}'
    )


def test_turn_without_artifacts_writes_an_empty_list_and_no_timestamp() -> None:
    assert dumps(turn_to_dict(Turn("turn-2", Role.ASSISTANT))) == (
        b'{"id":"turn-2","role":"assistant","artifacts":[]}'
    )


def test_metadata_appears_only_when_control_is_set() -> None:
    turn = Turn("summary-1", Role.ASSISTANT, control=TraversalControl.STOP)
    assert loads(dumps(turn_to_dict(turn)))["metadata"] == {"control": "stop"}


def test_go_written_turn_with_nanoseconds_and_parent_loads() -> None:
    raw = (
        b'{"id":"b","parent_id":"a","role":"tool","artifacts":null,'
        b'"timestamp":"2024-05-06T07:08:09.123456789Z","metadata":{"control":"skip"}}'
    )
    turn = turn_from_dict(loads(raw))
    assert turn.parent_id == "a"
    assert turn.artifacts == ()
    assert turn.control is TraversalControl.SKIP
    assert turn.timestamp == datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)


def test_round_trip_keeps_event_id() -> None:
    turn = Turn("u1", Role.USER, [Text("hi")], event_id="evt-1")
    assert turn_from_dict(loads(dumps(turn_to_dict(turn)))) == turn
