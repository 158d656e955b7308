"""Turns: one message of a conversation, and their JSON form.

The JSON matches the Go framework's files exactly: keys `id, parent_id?, role,
artifacts, timestamp?, metadata?`; `parent_id` omitted when empty, `artifacts`
always a list of `{"kind","data"}` envelopes, `timestamp` omitted when unset,
`metadata` present only when it carries something. We add one optional metadata
key, `event_id` (the ingress event a turn came from), which Go readers ignore.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

import orjson

from ore_core.artifacts import Artifact, ArtifactRegistry, decode_envelope, encode_envelope
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


def generate_turn_id() -> str:
    """16 lowercase hex characters from the OS CSPRNG."""
    return secrets.token_hex(8)


@dataclass(slots=True)
class Turn:
    """One node of the conversation tree.

    `control` steers the active-path walk (stop: include and end; skip: leave out and
    go on). `event_id` names the ingress event the turn was created from, so a
    redelivered event can be recognised. Turns handed out by a Thread are copies.
    """

    id: str
    role: Role | str
    artifacts: list[Artifact] = field(default_factory=list)
    parent_id: str = ""
    timestamp: datetime | None = None
    control: TraversalControl | str = TraversalControl.DEFAULT
    event_id: str = ""

    def copy(self) -> Turn:
        """A copy whose artifact list can be changed without touching this turn."""
        # Positional construction: about twice as fast as dataclasses.replace, and
        # copies are made for every turn of every active-path walk.
        return Turn(
            self.id,
            self.role,
            list(self.artifacts),
            self.parent_id,
            self.timestamp,
            self.control,
            self.event_id,
        )


_RFC3339 = orjson.OPT_UTC_Z | orjson.OPT_NAIVE_UTC


def format_timestamp(value: datetime) -> str:
    """RFC 3339 with trimmed fractional seconds, `Z` for UTC (as Go's RFC3339Nano)."""
    # orjson formats a datetime about 4x faster than strftime: this runs once per entry.
    text: str = orjson.dumps(value, option=_RFC3339)[1:-1].decode()
    if value.microsecond:
        head, _, frac = text.partition(".")
        digits = frac[:6].rstrip("0")
        return f"{head}.{digits}{frac[6:]}"
    return text


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
    out: dict[str, Any] = {"id": turn.id}
    if turn.parent_id:
        out["parent_id"] = turn.parent_id
    out["role"] = str(turn.role)
    out["artifacts"] = encode_envelope(turn.artifacts)
    if turn.timestamp is not None:
        out["timestamp"] = format_timestamp(turn.timestamp)
    if turn.control or turn.event_id:
        meta: dict[str, str] = {}
        if turn.control:
            meta["control"] = str(turn.control)
        if turn.event_id:
            meta["event_id"] = turn.event_id
        out["metadata"] = meta
    return out


def turn_from_dict(data: Mapping[str, Any], reg: ArtifactRegistry | None = None) -> Turn:
    """Decode a turn written by `turn_to_dict` or by the Go framework."""
    if not isinstance(data, Mapping):
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
    meta = data.get("metadata") or {}
    if not isinstance(meta, Mapping):
        raise LedgerError(f"turn {turn_id!r}: metadata must be an object")
    control = meta.get("control", "") or ""
    event_id = meta.get("event_id", "") or ""
    return Turn(
        id=turn_id,
        role=_ROLES.get(role, role),
        artifacts=artifacts,
        parent_id=parent_id,
        timestamp=timestamp,
        control=parse_control(control),
        event_id=str(event_id),
    )


_ROLES: dict[str, Role | str] = {role.value: role for role in Role}
_CONTROLS: dict[str, TraversalControl] = {c.value: c for c in TraversalControl}


def parse_control(value: Any) -> TraversalControl | str:
    """The TraversalControl named by `value`; unknown values are kept as strings."""
    control = _CONTROLS.get(value)
    return str(value) if control is None else control
