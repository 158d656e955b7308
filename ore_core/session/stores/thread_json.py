"""The thread file format: one JSON object per thread, as the Go framework writes it.

`{"id": ..., "current_tip"?: ..., "metadata"?: {...}, "turns": [<Turn JSON>, ...]}`.
`turns` holds every turn of every branch; `current_tip` and `metadata` are omitted when
empty. Where the Go writer emitted turns in random map order, we sort them by timestamp
then id, so saving the same thread twice gives the same bytes. On load we accept what
Go wrote: `"turns": null`, no `metadata` (legacy files), turns in any order.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from ore_core import jsonutil
from ore_core.errors import LedgerError
from ore_core.ledger.thread import Thread
from ore_core.turn import Turn, turn_from_dict, turn_to_dict

__all__ = [
    "build_thread",
    "decode_thread",
    "encode_thread",
    "ordered_turns",
    "thread_from_dict",
    "thread_to_dict",
]

_NO_TIME = datetime.min.replace(tzinfo=UTC)


def _turn_order(turn: Turn) -> tuple[datetime, str]:
    stamp = turn.timestamp
    if stamp is None:
        return _NO_TIME, turn.id
    # A naive stamp is UTC (as format_timestamp writes it); comparing needs an aware one.
    return (stamp if stamp.tzinfo is not None else stamp.replace(tzinfo=UTC)), turn.id


def ordered_turns(turns: Iterable[Turn]) -> list[Turn]:
    """`turns` sorted by timestamp then id (unstamped first): a stable order to store."""
    return sorted(turns, key=_turn_order)


def build_thread(
    thread_id: str, turns: Iterable[Turn], tip: str, metadata: Mapping[str, str]
) -> Thread:
    """An unbound Thread holding `turns` (every branch), `tip` and `metadata`."""
    thread = Thread(thread_id, metadata=metadata)
    for turn in turns:
        thread.save_turn(turn)
    if tip:
        thread.set_current_tip(tip)
    return thread


def thread_to_dict(thread: Thread) -> dict[str, Any]:
    """The Go-compatible JSON object of `thread` (ArtifactError if a turn holds a delta)."""
    out: dict[str, Any] = {"id": thread.id}
    if thread.current_tip:
        out["current_tip"] = thread.current_tip
    metadata = thread.meta().all()
    if metadata:
        out["metadata"] = metadata
    out["turns"] = [turn_to_dict(turn) for turn in ordered_turns(thread.all_turns())]
    return out


def thread_from_dict(data: Any, *, expected_id: str | None = None) -> Thread:
    """Decode a thread object; LedgerError names what is wrong with it.

    `expected_id` (the id the file is stored under) must match the id inside, so a
    copied or renamed file is reported rather than silently answering for another id.
    """
    if not isinstance(data, Mapping):
        raise LedgerError(f"thread must be a JSON object, got {type(data).__name__}")
    thread_id = data.get("id")
    if not isinstance(thread_id, str):
        raise LedgerError(f'thread "id" must be a string, got {thread_id!r}')
    if expected_id is not None and thread_id != expected_id:
        raise LedgerError(f"file holds thread {thread_id!r}, expected {expected_id!r}")
    tip = data.get("current_tip") or ""
    if not isinstance(tip, str):
        raise LedgerError(f'thread "current_tip" must be a string, got {tip!r}')
    metadata = data.get("metadata") or {}
    if not isinstance(metadata, Mapping) or not all(
        isinstance(key, str) and isinstance(value, str) for key, value in metadata.items()
    ):
        raise LedgerError('thread "metadata" must be an object of strings')
    raw_turns = data.get("turns") or []
    if not isinstance(raw_turns, list):
        raise LedgerError(f'thread "turns" must be a list, got {type(raw_turns).__name__}')
    turns = [turn_from_dict(raw) for raw in raw_turns]
    return build_thread(thread_id, turns, tip, metadata)


def encode_thread(thread: Thread) -> bytes:
    """The thread file's bytes."""
    return jsonutil.dumps(thread_to_dict(thread))


def decode_thread(data: bytes, *, expected_id: str | None = None) -> Thread:
    """Parse a thread file; LedgerError (with the cause) when it is not a valid thread."""
    try:
        parsed = jsonutil.loads(data)
    except jsonutil.JSONDecodeError as exc:
        raise LedgerError(f"invalid JSON: {exc}") from exc
    return thread_from_dict(parsed, expected_id=expected_id)
