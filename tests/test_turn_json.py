"""Turn JSON matches the Go framework's files (docs/go-compatibility.md, "Turns")."""

import dataclasses
import os
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ore_core import Artifact, Role, Text, TraversalControl, Turn
from ore_core.artifacts import encode_envelope
from ore_core.jsonutil import dumps, loads
from ore_core.ledger import turn_from_dict, turn_to_dict
from ore_core.turn import format_timestamp, generate_turn_id, turn_json


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


# -- the hand-written constructor and formatter agree with what they replaced ---------------


def _reference_format_timestamp(value: datetime) -> str:
    """`format_timestamp` as it was before its UTC shortcut (issue 11)."""
    text: str = orjson.dumps(value, option=orjson.OPT_UTC_Z | orjson.OPT_NAIVE_UTC)[1:-1].decode()
    if value.microsecond:
        head, _, frac = text.partition(".")
        digits = frac[:6].rstrip("0")
        return f"{head}.{digits}{frac[6:]}"
    return text


_ZONES = st.sampled_from(
    [
        UTC,
        timezone(timedelta(0)),
        timezone(timedelta(hours=2)),
        timezone(timedelta(hours=-5, minutes=-30)),
        timezone(timedelta(hours=5, minutes=45, seconds=30)),
    ]
)


@given(st.one_of(st.datetimes(timezones=_ZONES), st.datetimes()))
def test_format_timestamp_writes_what_it_wrote_before_its_utc_shortcut(value: datetime) -> None:
    assert format_timestamp(value) == _reference_format_timestamp(value)


@dataclasses.dataclass(frozen=True, slots=True)
class _GeneratedTurn:
    """Turn's fields with the `__init__` dataclasses generates, to compare against."""

    id: str
    role: Role | str
    artifacts: tuple[Artifact, ...] = ()
    parent_id: str = ""
    timestamp: datetime | None = None
    control: TraversalControl | str = TraversalControl.DEFAULT
    event_id: str = ""

    def __post_init__(self) -> None:
        if type(self.artifacts) is not tuple:
            object.__setattr__(self, "artifacts", tuple(self.artifacts))


_TURN_ARGS = st.tuples(
    st.text(max_size=4),
    st.sampled_from([*Role, "plugin-role"]),
    st.lists(st.builds(Text, st.text(max_size=3)), max_size=2).flatmap(
        lambda texts: st.sampled_from([texts, tuple(texts)])
    ),
    st.text(max_size=4),
    st.none() | st.datetimes(timezones=st.just(UTC)),
    st.sampled_from([*TraversalControl, "later-kind"]),
    st.text(max_size=4),
)


@given(_TURN_ARGS, st.integers(2, 7), st.integers(2, 7))
def test_turn_s_constructor_takes_what_the_generated_one_takes(
    args: tuple[Any, ...], given_count: int, positional: int
) -> None:
    """Any number of the arguments given (the rest default), any of them by keyword."""
    names = [field.name for field in dataclasses.fields(_GeneratedTurn)]
    values = list(args[:given_count])
    keywords = dict(zip(names[positional:given_count], values[positional:], strict=False))
    turn = Turn(*values[:positional], **keywords)
    expected = _GeneratedTurn(*values[:positional], **keywords)
    assert [getattr(turn, name) for name in names] == [getattr(expected, n) for n in names]
    assert type(turn.artifacts) is tuple
    assert turn._json is None
    assert turn == dataclasses.replace(turn)
    assert hash(turn) == hash(dataclasses.replace(turn))


def test_turn_s_constructor_refuses_what_the_generated_one_refuses() -> None:
    for args, kwargs in [((), {}), (("t",), {}), (("t", "user"), {"_json": b"{}"})]:
        with pytest.raises(TypeError):
            _GeneratedTurn(*args, **kwargs)
        with pytest.raises(TypeError):
            Turn(*args, **kwargs)


def test_a_turn_stays_immutable_and_has_no_instance_dict() -> None:
    turn = Turn("t", Role.USER, [Text("hi")])
    with pytest.raises(dataclasses.FrozenInstanceError):
        turn.id = "u"  # type: ignore[misc]
    assert not hasattr(turn, "__dict__")
    assert turn.artifacts == (Text("hi"),)


def test_turn_ids_are_sixteen_hex_digits_and_do_not_repeat() -> None:
    ids = [generate_turn_id() for _ in range(3000)]  # several refills of the pool
    assert all(len(turn_id) == 16 and int(turn_id, 16) >= 0 for turn_id in ids)
    assert all(turn_id == turn_id.lower() for turn_id in ids)
    assert len(set(ids)) == len(ids)


def test_a_forked_child_makes_other_turn_ids_than_its_parent() -> None:
    generate_turn_id()  # the pool holds ids the child would inherit
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report its ids and leave at once
        os.close(read)
        os.write(write, ",".join(generate_turn_id() for _ in range(50)).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        child = set(pipe.read().decode().split(","))
    os.waitpid(pid, 0)
    parent = {generate_turn_id() for _ in range(50)}
    assert len(child) == 50
    assert not child & parent


def _reference_turn_to_dict(turn: Turn) -> dict[str, Any]:
    """`turn_to_dict` as it was before it made its common keys in one literal (issue 11)."""
    out: dict[str, Any] = {"id": turn.id}
    if turn.parent_id:
        out["parent_id"] = turn.parent_id
    out["role"] = str(turn.role)
    out["artifacts"] = encode_envelope(turn.artifacts)
    if turn.timestamp is not None:
        out["timestamp"] = _reference_format_timestamp(turn.timestamp)
    if turn.control or turn.event_id:
        meta: dict[str, str] = {}
        if turn.control:
            meta["control"] = str(turn.control)
        if turn.event_id:
            meta["event_id"] = turn.event_id
        out["metadata"] = meta
    return out


@given(_TURN_ARGS)
def test_turn_json_is_the_bytes_it_was_before_and_encoded_once(args: tuple[Any, ...]) -> None:
    turn = Turn(*args)
    assert turn_json(turn) == dumps(_reference_turn_to_dict(turn))
    assert list(turn_to_dict(turn)) == list(_reference_turn_to_dict(turn))  # key order too
    assert turn_json(turn) is turn_json(turn)
