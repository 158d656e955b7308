"""Journal entries: how writer calls become entry objects, and how entries replay.

An entry is the JSON object `{"tx_type", "timestamp", "payload"}` described in
`ore_core.ledger.journal`; entry and payload carry the same timestamp. One writer
call can produce more than one entry (`add_turn` + `update_tip` for an append). Such
a call's first entry carries one extra key, `"group": n` (after `payload`): the call
wrote n entries together, and replay applies all n or none of them, so a write torn
anywhere leaves the state of an earlier call, never half of one. Go readers ignore
the key; Go-written files never have it.

Replay is forgiving by contract: the first entry that is not an object, names an
unknown tx type, or has a payload that cannot be decoded stops it; the state built so
far is kept and `JournalState.problem` says why. Entry timestamps carry no state and
are not parsed.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime
from typing import Any

import orjson

from ore_core.errors import LedgerError
from ore_core.ledger.clock import Clock
from ore_core.ledger.journal import (
    META_KEY,
    TX_ADD_TURN,
    TX_UPDATE_CONTROL,
    TX_UPDATE_META,
    TX_UPDATE_PARENT,
    TX_UPDATE_TIP,
    JournalState,
)
from ore_core.turn import (
    TraversalControl,
    Turn,
    format_timestamp,
    parse_control,
    turn_from_dict,
    turn_json,
    turn_to_dict,
)

__all__ = [
    "GROUP_KEY",
    "Entry",
    "EntrySink",
    "EntryWriter",
    "Replay",
    "StampFormatter",
    "collector_paused",
    "replay",
]

Entry = dict[str, Any]
"""One journal entry as a JSON object."""

EntrySink = Callable[[list[Entry]], None]
"""Receives the entries of one writer call; must store them as one unit (one write)."""

GROUP_KEY = "group"
"""The entry key that marks the first entry of a multi-entry write (value: its size)."""

# A decoded entry: a function that applies it to a JournalState, and its two arguments.
_Op = tuple[Callable[[JournalState, Any, Any], None], Any, Any]


class StampFormatter:
    """Formats clock readings like `format_timestamp`, reusing the text of the last second.

    Formatting a datetime costs about as much as serialising a whole entry, and every
    entry needs one; readings within one second share everything but the fraction.
    Safe to share between threads: the cache is one tuple, replaced whole.
    """

    __slots__ = ("_cache",)

    def __init__(self) -> None:
        # (start of the cached second, its text before the fraction, its zone suffix)
        self._cache: tuple[datetime, str, str] | None = None

    def format(self, value: datetime) -> str:
        """`format_timestamp(value)`, cheaper when the previous reading had the same second."""
        cache = self._cache
        if cache is None or not _same_second(value, cache[0]):
            second = value.replace(microsecond=0)
            text = format_timestamp(second)
            cut = len(text) - (1 if text.endswith("Z") else 6)
            cache = self._cache = (second, text[:cut], text[cut:])
        _, prefix, suffix = cache
        micro = value.microsecond
        if not micro:
            return prefix + suffix
        return f"{prefix}.{micro:06d}".rstrip("0") + suffix


def _same_second(value: datetime, second: datetime) -> bool:
    """True when `value` lies in the wall-clock second starting at `second`, same zone."""
    if value.tzinfo is not second.tzinfo or value.fold != second.fold:
        return False
    delta = value - second
    return not delta.days and not delta.seconds


class EntryWriter:
    """The `JournalWriter` of one thread: builds each call's entries, hands them to a sink.

    Every entry of a call gets the same `now()` of `clock`. The sink (a repository)
    decides where the entries go; this class only decides what they say.

    A sink that only serialises the entries with `jsonutil.dumps` (a journal file, a
    JetStream message) passes `encoded_turns=True`: an added turn's payload then holds
    the turn's cached JSON (`turn_json`, shared with its `turn_complete` event) as an
    `orjson.Fragment`, which dumps to the same bytes. Other sinks get the dict.
    """

    __slots__ = ("_clock", "_encoded_turns", "_sink", "_stamps")

    def __init__(self, sink: EntrySink, clock: Clock, *, encoded_turns: bool = False) -> None:
        self._sink = sink
        self._clock = clock
        self._stamps = StampFormatter()
        self._encoded_turns = encoded_turns

    def add_turn(self, turn: Turn, tip: str | None = None) -> None:
        """Append `add_turn`, and `update_tip` when `tip` is given, as one group."""
        stamp = self._stamps.format(self._clock.now())
        added: Entry = {
            "tx_type": TX_ADD_TURN,
            "timestamp": stamp,
            "payload": {"timestamp": stamp, "turn": self._turn(turn)},
        }
        if tip is None:
            self._sink([added])
            return
        added[GROUP_KEY] = 2
        moved = {
            "tx_type": TX_UPDATE_TIP,
            "timestamp": stamp,
            "payload": {"timestamp": stamp, "current_tip": tip},
        }
        self._sink([added, moved])

    def _turn(self, turn: Turn) -> Any:
        if not self._encoded_turns:
            return turn_to_dict(turn)
        try:
            return orjson.Fragment(turn_json(turn))
        except TypeError:  # a value orjson cannot write: the sink's dumps reports it, as ever
            return turn_to_dict(turn)

    def update_tip(self, tip: str) -> None:
        """Append `update_tip`."""
        self._write(TX_UPDATE_TIP, {"current_tip": tip})

    def update_control(self, turn_id: str, control: str) -> None:
        """Append `update_control`."""
        self._write(TX_UPDATE_CONTROL, {"turn_id": turn_id, "control": str(control)})

    def update_parent(self, turn_id: str, parent_id: str) -> None:
        """Append `update_parent`."""
        self._write(TX_UPDATE_PARENT, {"turn_id": turn_id, "parent_id": parent_id})

    def update_meta(self, key: str, value: str | None) -> None:
        """Append a metadata change (`value=None`: a delete) as Go readers skip it: an
        `update_control` of the turn `""` carrying `ore_meta` (see ore_core.ledger.journal)."""
        change: dict[str, Any] = {"key": key}
        if value is None:
            change["deleted"] = True
        else:
            change["value"] = value
        self._write(TX_UPDATE_CONTROL, {"turn_id": "", "control": "", META_KEY: change})

    def _write(self, tx_type: str, fields: dict[str, Any]) -> None:
        stamp = self._stamps.format(self._clock.now())
        payload = {"timestamp": stamp, **fields}
        self._sink([{"tx_type": tx_type, "timestamp": stamp, "payload": payload}])


class Replay:
    """Replays entries one at a time into `state`, holding back an unfinished group.

    `feed` raises LedgerError for an entry that cannot be applied; the caller stops
    there and records the problem with `stop` (it knows the line or position).
    """

    __slots__ = ("_group", "_group_size", "state")

    def __init__(self) -> None:
        self.state = JournalState()
        self._group: list[_Op] = []
        self._group_size = 0

    def feed(self, entry: Any) -> bool:
        """Apply one decoded entry, or hold it until the rest of its group arrives.

        Returns True when nothing is held back (the entry ended a complete write).
        """
        apply, first, second = op = _decode(entry)
        size = entry.get(GROUP_KEY)
        if size is None and not self._group_size:
            apply(self.state, first, second)
            self.state.entries += 1
            return True
        return self._feed_grouped(op, size)

    def _feed_grouped(self, op: _Op, size: Any) -> bool:
        if not self._group_size:
            if type(size) is not int or size < 1:
                raise LedgerError(f"{GROUP_KEY} must be a positive integer, got {size!r}")
            self._group_size = size
        elif size is not None:
            raise LedgerError("a group starts inside an unfinished group")
        self._group.append(op)
        if len(self._group) < self._group_size:
            return False
        for apply, first, second in self._group:
            apply(self.state, first, second)
        self.state.entries += self._group_size
        self._group = []
        self._group_size = 0
        return True

    def stop(self, problem: str) -> JournalState:
        """End replay early: drop any unfinished group and record why."""
        self.state.problem = problem
        return self.state

    def finish(self) -> JournalState:
        """End replay at the end of the journal; an unfinished group there was a torn write."""
        if self._group_size:
            return self.stop(
                f"the last write is incomplete: {len(self._group)} of its "
                f"{self._group_size} entries are present; it was not applied"
            )
        return self.state


def replay(entries: Iterable[Any]) -> JournalState:
    """Replay decoded entries in order; stops quietly at the first bad one (see module doc)."""
    run = Replay()
    with collector_paused():
        for position, entry in enumerate(entries, 1):
            try:
                run.feed(entry)
            except LedgerError as exc:
                return run.stop(f"entry {position}: {exc}")
    return run.finish()


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while replay builds the objects it returns.

    Replay allocates almost only what it keeps, so collector passes over the growing
    state are pure cost (about a third of a 100k-turn hydrate). Reference counting
    still frees garbage as usual; the collector resumes afterwards if it was on.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _decode(entry: Any) -> _Op:
    """The change an entry stands for; LedgerError says why it cannot be applied."""
    if type(entry) is not dict:
        raise LedgerError(f"entry is a JSON {type(entry).__name__}, not an object")
    tx_type = entry.get("tx_type")
    decoder = _DECODERS.get(tx_type) if type(tx_type) is str else None
    if decoder is None:
        raise LedgerError(f"unknown tx_type {tx_type!r}")
    payload = entry.get("payload")
    if type(payload) is not dict:
        raise LedgerError(f"{tx_type}: payload is not a JSON object")
    return decoder(payload)


def _text(payload: dict[str, Any], tx_type: str, key: str) -> str:
    """A string field; absent means "" as in the Go reader, any other type is an error."""
    value = payload.get(key, "")
    if type(value) is not str:
        raise LedgerError(f"{tx_type}: {key} must be a string, got {type(value).__name__}")
    return value


# Appliers: how a decoded change alters the state. Updates of unknown turns do nothing.


def _put_turn(state: JournalState, turn: Turn, _: None) -> None:
    state.turns[turn.id] = turn


def _set_tip(state: JournalState, tip: str, _: None) -> None:
    state.tip = tip


def _set_control(state: JournalState, turn_id: str, control: TraversalControl | str) -> None:
    turn = state.turns.get(turn_id)
    if turn is not None:
        state.turns[turn_id] = replace(turn, control=control)


def _set_parent(state: JournalState, turn_id: str, parent_id: str) -> None:
    turn = state.turns.get(turn_id)
    if turn is not None:
        state.turns[turn_id] = replace(turn, parent_id=parent_id)


def _set_meta(state: JournalState, key: str, value: str | None) -> None:
    if value is None:
        state.meta.pop(key, None)
    else:
        state.meta[key] = value


def _decode_add_turn(payload: dict[str, Any]) -> _Op:
    data = payload.get("turn")
    if type(data) is not dict:
        raise LedgerError("add_turn: payload has no turn object")
    try:
        turn = turn_from_dict(data)
    except Exception as exc:  # artifact classes come from plugins: any failure is a bad entry
        raise LedgerError(f"add_turn: cannot decode turn: {exc}") from exc
    return _put_turn, turn, None


def _decode_update_tip(payload: dict[str, Any]) -> _Op:
    return _set_tip, _text(payload, TX_UPDATE_TIP, "current_tip"), None


def _decode_update_control(payload: dict[str, Any]) -> _Op:
    change = payload.get(META_KEY)
    if change is not None:  # a metadata change, written where Go readers skip it
        if type(change) is not dict:
            raise LedgerError(f"update_control: {META_KEY} must be an object")
        return _decode_update_meta(change)
    turn_id = _text(payload, TX_UPDATE_CONTROL, "turn_id")
    return _set_control, turn_id, parse_control(_text(payload, TX_UPDATE_CONTROL, "control"))


def _decode_update_parent(payload: dict[str, Any]) -> _Op:
    turn_id = _text(payload, TX_UPDATE_PARENT, "turn_id")
    return _set_parent, turn_id, _text(payload, TX_UPDATE_PARENT, "parent_id")


def _decode_update_meta(payload: dict[str, Any]) -> _Op:
    key = payload.get("key")
    if type(key) is not str:
        raise LedgerError("update_meta: key must be a string")
    if payload.get("deleted") is True:
        return _set_meta, key, None
    value = payload.get("value")
    if type(value) is not str:
        raise LedgerError(f"update_meta: value of {key!r} must be a string")
    return _set_meta, key, value


_DECODERS: dict[str, Callable[[dict[str, Any]], _Op]] = {
    TX_ADD_TURN: _decode_add_turn,
    TX_UPDATE_TIP: _decode_update_tip,
    TX_UPDATE_CONTROL: _decode_update_control,
    TX_UPDATE_PARENT: _decode_update_parent,
    TX_UPDATE_META: _decode_update_meta,
}
