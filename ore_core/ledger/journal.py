"""The journal contract: how a Thread's mutations become append-only entries.

A `JournalWriter` is bound to one thread; a bound `Thread` calls it once per
mutation, so persistence is O(1) per change and never rewrites the thread. A
`Repository` owns the writers of many threads and replays them (`hydrate`).

Entry shapes (one JSON object per line in files):
`{"tx_type": T, "timestamp": RFC3339, "payload": {...}}` with T one of
`add_turn` `{"timestamp","turn"}`, `update_tip` `{"timestamp","current_tip"}`,
`update_control` `{"timestamp","turn_id","control"}`,
`update_parent` `{"timestamp","turn_id","parent_id"}` (the Go framework's four).

Thread metadata is written in a form a Go reader skips: an `update_control` of the turn
`""` (which no thread has: Go applies it to nothing and reads on), carrying
`"ore_meta": {"key","value"}` or `{"key","deleted":true}` (a field Go does not know and
ignores). Journals of older ores hold `update_meta` entries of the same shape; they are
still read (a Go reader stops at them: its replay ends at an unknown `tx_type`).

A write of several entries (an append: `add_turn` + `update_tip`) marks its first
entry with `"group": N` after the payload; replay applies all N entries or none, so a
file cut inside the write never yields "turn stored, tip not moved". Go readers
ignore the key.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from ore_core.turn import Turn

__all__ = [
    "TX_ADD_TURN",
    "TX_UPDATE_CONTROL",
    "TX_UPDATE_META",
    "TX_UPDATE_PARENT",
    "TX_UPDATE_TIP",
    "META_KEY",
    "JournalState",
    "JournalWriter",
    "Repository",
]

TX_ADD_TURN = "add_turn"
TX_UPDATE_TIP = "update_tip"
TX_UPDATE_CONTROL = "update_control"
TX_UPDATE_PARENT = "update_parent"
TX_UPDATE_META = "update_meta"
"""The metadata entries of older ores (read, no longer written)."""
META_KEY = "ore_meta"
"""The payload field of a metadata change, in an `update_control` of the turn `""`."""


class JournalWriter(Protocol):
    """Appends the entries of one thread. Called by a bound Thread, one call per mutation."""

    def add_turn(self, turn: Turn, tip: str | None = None) -> None:
        """Append `add_turn`, and `update_tip` when `tip` is given, as one write."""

    def update_tip(self, tip: str) -> None:
        """Append `update_tip`."""

    def update_control(self, turn_id: str, control: str) -> None:
        """Append `update_control`."""

    def update_parent(self, turn_id: str, parent_id: str) -> None:
        """Append `update_parent`."""

    def update_meta(self, key: str, value: str | None) -> None:
        """Append `update_meta`; `value=None` records a delete."""


@dataclass(slots=True)
class JournalState:
    """What replaying a thread's journal produced.

    `problem` says why replay stopped early (a torn or garbage line, an unknown tx
    type); everything before that point is kept. An absent journal is an empty state.
    """

    turns: dict[str, Turn] = field(default_factory=dict)
    tip: str = ""
    meta: dict[str, str] = field(default_factory=dict)
    entries: int = 0
    problem: str | None = None


class Repository(Protocol):
    """An append-only journal per thread (memory or `.jsonl` files)."""

    def writer(self, thread_id: str) -> JournalWriter:
        """The writer bound to `thread_id` (the same object for repeated calls)."""

    def save_turn(self, thread_id: str, turn: Turn) -> None:
        """Append `add_turn` (does not move the tip: journal `update_tip` too)."""

    def update_tip(self, thread_id: str, tip: str) -> None:
        """Append `update_tip`."""

    def update_control(self, thread_id: str, turn_id: str, control: str) -> None:
        """Append `update_control`."""

    def update_parent(self, thread_id: str, turn_id: str, parent_id: str) -> None:
        """Append `update_parent`."""

    def hydrate(self, thread_id: str) -> JournalState:
        """Replay the thread's journal; stops quietly at the first bad entry."""

    def exists(self, thread_id: str) -> bool:
        """True when the thread has a journal."""

    def delete(self, thread_id: str) -> bool:
        """Remove the thread's journal; True when there was one."""

    def thread_ids(self) -> list[str]:
        """Ids of every thread with a journal, sorted."""

    def flush(self) -> None:
        """Make everything appended so far durable according to the fsync policy."""

    def close(self) -> None:
        """Flush, release locks and file handles. Idempotent."""
