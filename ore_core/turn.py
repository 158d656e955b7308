"""Turns: one message of a conversation, and their JSON form.

The JSON matches the Go framework's files exactly: keys `id, parent_id?, role,
artifacts, timestamp?, metadata?`; `parent_id` omitted when empty, `artifacts`
always a list of `{"kind","data"}` envelopes, `timestamp` omitted when unset,
`metadata` present only when it carries something. We add one optional metadata
key, `event_id` (the ingress event a turn came from), which Go readers ignore.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

import orjson

from ore_core.artifacts import Artifact, ArtifactRegistry, decode_envelope, encode_envelope
from ore_core.artifacts.kinds import Text
from ore_core.errors import ArtifactError, LedgerError

__all__ = [
    "Role",
    "TraversalControl",
    "Turn",
    "format_timestamp",
    "generate_turn_id",
    "parse_control",
    "parse_timestamp",
    "turn_from_dict",
    "turn_json",
    "turn_text",
    "turn_to_dict",
]


class Role(StrEnum):
    """Who produced a turn."""

    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"


class TraversalControl(StrEnum):
    """How the active-path walk treats a turn. Empty means continue."""

    DEFAULT = ""
    CONTINUE = "continue"
    STOP = "stop"
    SKIP = "skip"


class _IdPool(threading.local):
    """Turn ids made from the OS's random bytes 4 KiB at a time, one pool per OS thread.

    One `os.urandom` call per id made the event loop queue behind store worker threads
    for the GIL under load; the ids of 4 KiB are cut in one regex call (in C), so an id
    costs a list pop.
    """

    def __init__(self) -> None:
        self.ids: list[str] = []


_pool = _IdPool()
_ID_HEX = re.compile("[0-9a-f]{16}")


def _forget_ids_after_fork() -> None:
    # A forked child inherits the pool of the thread that forked: unless it is
    # emptied, parent and child hand out the same ids.
    _pool.ids = []


os.register_at_fork(after_in_child=_forget_ids_after_fork)


def generate_turn_id() -> str:
    """16 lowercase hex characters from the OS CSPRNG."""
    ids = _pool.ids
    if not ids:
        ids += _ID_HEX.findall(os.urandom(4096).hex())
    return ids.pop()


@dataclass(frozen=True, slots=True)
class Turn:
    """One node of the conversation tree: an immutable value.

    `control` steers the active-path walk (stop: include and end; skip: leave out and
    go on). `event_id` names the ingress event the turn was created from, so a
    redelivered event can be recognised. Being immutable (artifacts are a tuple), a
    turn can be shared by the thread, its readers and its events without copies;
    the ledger changes a turn by replacing it (`dataclasses.replace`).

    Immutability also lets a turn keep its JSON: `turn_json` encodes it on first use
    and every later reader (its `turn_complete` event, the store) reuses the bytes.
    """

    id: str
    role: Role | str
    artifacts: tuple[Artifact, ...] = ()
    parent_id: str = ""
    timestamp: datetime | None = None
    control: TraversalControl | str = TraversalControl.DEFAULT
    event_id: str = ""
    extra: tuple[tuple[str, str], ...] = ()
    """Further metadata (key, value) pairs, in order: a relayed user turn's `sender`,
    `edit_of`, `reply_to` (issue 29)."""
    # `turn_json`'s cache: not a field of the value (no init, repr, compare or hash), and
    # a replaced turn starts without it.
    _json: bytes | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Any iterable of artifacts becomes a tuple: the value is immutable.
        if type(self.artifacts) is not tuple:
            object.__setattr__(self, "artifacts", tuple(self.artifacts))


_RFC3339 = orjson.OPT_UTC_Z | orjson.OPT_NAIVE_UTC


def format_timestamp(value: datetime) -> str:
    """RFC 3339 with trimmed fractional seconds, `Z` for UTC (as Go's RFC3339Nano)."""
    # orjson formats a datetime about 4x faster than strftime: this runs once per entry.
    text: str = orjson.dumps(value, option=_RFC3339)[1:-1].decode()
    if not value.microsecond:
        return text
    if text[-1] == "Z":  # UTC, the common case: six digits, not all zeros, then the Z
        return text.rstrip("0Z") + "Z"
    head, _, frac = text.partition(".")
    digits = frac[:6].rstrip("0")
    return f"{head}.{digits}{frac[6:]}"


def parse_timestamp(text: str) -> datetime:
    """Parse RFC 3339 with up to 9 fractional digits (extra digits beyond µs dropped)."""
    if not isinstance(text, str) or len(text) < 20:
        raise LedgerError(f"invalid timestamp {text!r}")
    try:
        return datetime.fromisoformat(text)  # the common case: what we write ourselves
    except ValueError:
        pass
    head, dot, rest = text.partition(".")
    if dot:
        digits = 0
        while digits < len(rest) and rest[digits].isdigit():
            digits += 1
        frac, tail = rest[:digits], rest[digits:]
        text = f"{head}.{frac[:6].ljust(6, '0')}{tail}" if frac else head + tail
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise LedgerError(f"invalid timestamp {text!r}: {exc}") from exc


def turn_to_dict(turn: Turn) -> dict[str, Any]:
    """The Go-compatible JSON object of `turn` (raises ArtifactError for deltas)."""
    # One literal for the keys every turn but a thread's first has, in their order
    # (deleting a key keeps the order of the others).
    out: dict[str, Any] = {
        "id": turn.id,
        "parent_id": turn.parent_id,
        "role": str(turn.role),
        "artifacts": encode_envelope(turn.artifacts),
    }
    if not turn.parent_id:
        del out["parent_id"]
    if turn.timestamp is not None:
        out["timestamp"] = format_timestamp(turn.timestamp)
    if turn.control or turn.event_id or turn.extra:
        meta: dict[str, str] = {}
        if turn.control:
            meta["control"] = str(turn.control)
        if turn.event_id:
            meta["event_id"] = turn.event_id
        for key, value in turn.extra:
            meta[key] = value
        out["metadata"] = meta
    return out


def turn_json(turn: Turn) -> bytes:
    """`turn_to_dict(turn)` as compact JSON bytes, encoded once per turn and then reused.

    A turn appears in its `turn_complete` event and in every store save; encoding it
    once saves a `turn_to_dict` and a timestamp formatting per use. Raises what
    `turn_to_dict` and `jsonutil.dumps` raise (ArtifactError for a delta, TypeError
    for a value orjson cannot write), and caches nothing then.
    """
    cached = turn._json
    if cached is None:
        # orjson's bytes keep its whole output buffer (4 KiB at least); the cache lives
        # as long as the turn does, in every loaded thread: keep an exact-size copy.
        cached = bytes(memoryview(orjson.dumps(turn_to_dict(turn))))
        object.__setattr__(turn, "_json", cached)
    return cached


def turn_from_dict(data: Mapping[str, Any], reg: ArtifactRegistry | None = None) -> Turn:
    """Decode a turn written by `turn_to_dict` or by the Go framework."""
    # `isinstance(x, dict)` first: parsed JSON is always a dict, and the ABC check is
    # several times slower on this path (once per turn of every hydrated thread).
    if not isinstance(data, dict) and not isinstance(data, Mapping):
        raise LedgerError(f"turn must be a JSON object, got {type(data).__name__}")
    turn_id = data.get("id", "")
    role = data.get("role", "")
    parent_id = data.get("parent_id", "") or ""
    if not isinstance(turn_id, str) or not isinstance(role, str) or not isinstance(parent_id, str):
        raise LedgerError(f"turn {turn_id!r}: id, role and parent_id must be strings")
    try:
        artifacts = decode_envelope(data.get("artifacts"), reg)
    except ArtifactError as exc:
        raise LedgerError(f"unmarshal artifacts: {exc}") from exc
    stamp = data.get("timestamp")
    timestamp = parse_timestamp(stamp) if stamp else None
    meta = data.get("metadata")
    if not meta:
        return Turn(turn_id, _ROLES.get(role, role), tuple(artifacts), parent_id, timestamp)
    if not isinstance(meta, dict) and not isinstance(meta, Mapping):
        raise LedgerError(f"turn {turn_id!r}: metadata must be an object")
    control = meta.get("control", "") or ""
    event_id = meta.get("event_id", "") or ""
    extra = tuple(
        (key, value)
        for key, value in meta.items()
        if key not in _KNOWN_META and isinstance(value, str)
    )
    return Turn(
        turn_id,
        _ROLES.get(role, role),
        tuple(artifacts),
        parent_id,
        timestamp,
        parse_control(control),
        str(event_id),
        extra,
    )


_KNOWN_META = frozenset({"control", "event_id"})


_ROLES: dict[str, Role | str] = {role.value: role for role in Role}
_CONTROLS: dict[str, TraversalControl] = {c.value: c for c in TraversalControl}


def parse_control(value: Any) -> TraversalControl | str:
    """The TraversalControl named by `value`; unknown values are kept as strings."""
    control = _CONTROLS.get(value)
    return str(value) if control is None else control


def turn_text(turn: Turn) -> str:
    """The text of a turn: its text artifacts joined by blank lines."""
    return "\n\n".join(a.content for a in turn.artifacts if isinstance(a, Text))
