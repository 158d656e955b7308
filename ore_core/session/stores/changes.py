"""Change tracking for stores that save incrementally (memory, SQLite, journal).

A store binds a `ChangeRecorder` (a `JournalWriter` that only remembers) to every
Thread it hands out. The Thread reports each mutation as it would to a journal; the
store's `save` takes the recorded changes and writes only those. Nothing reaches the
store before `save`, so copies of one thread stay independent until then.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import TracebackType

from ore_core.ledger.journal import JournalWriter
from ore_core.ledger.thread import Thread
from ore_core.turn import Turn

__all__ = [
    "AddTurn",
    "Change",
    "ChangeRecorder",
    "ChangeSet",
    "ChangeTracker",
    "SetControl",
    "SetMeta",
    "SetParent",
    "SetTip",
    "replay",
]


@dataclass(frozen=True, slots=True)
class AddTurn:
    """A turn was added or replaced; `tip` is set when the tip moved with it."""

    turn: Turn
    tip: str | None


@dataclass(frozen=True, slots=True)
class SetTip:
    """The current tip moved."""

    tip: str


@dataclass(frozen=True, slots=True)
class SetControl:
    """A turn's traversal control changed."""

    turn_id: str
    control: str


@dataclass(frozen=True, slots=True)
class SetParent:
    """A turn was re-parented."""

    turn_id: str
    parent_id: str


@dataclass(frozen=True, slots=True)
class SetMeta:
    """A metadata key was set, or deleted when `value` is None."""

    key: str
    value: str | None


Change = AddTurn | SetTip | SetControl | SetParent | SetMeta


@dataclass(slots=True)
class ChangeSet:
    """The net effect of a run of changes: what a snapshot store must rewrite."""

    # Touched turn ids, first change first: the turn as last recorded, or None when a
    # later control or parent change means the thread's own copy must be read.
    turns: dict[str, Turn | None] = field(default_factory=dict)
    tip: str | None = None
    meta: dict[str, str | None] = field(default_factory=dict)
    # Some entry of `turns` was set to None (it may have been recorded again since):
    # without one, `changed_turns` is the recorded turns as they are (most saves).
    reread: bool = False

    @classmethod
    def of(cls, changes: Sequence[Change]) -> ChangeSet:
        """Fold `changes` in order: touched turn ids, the last tip, the last value per key."""
        net = cls()
        turns = net.turns
        for change in changes:
            match change:
                case AddTurn(turn=turn, tip=tip):
                    turns[turn.id] = turn
                    if tip is not None:
                        net.tip = tip
                case SetTip(tip=tip):
                    net.tip = tip
                case SetControl(turn_id=turn_id) | SetParent(turn_id=turn_id):
                    turns[turn_id] = None
                    net.reread = True
                case SetMeta(key=key, value=value):
                    net.meta[key] = value
        return net

    def changed_turns(self, thread: Thread) -> list[Turn]:
        """The touched turns as they are in `thread` now, first changed first.

        Turns are the recorder's own copies (or fresh ones from `thread`): read them,
        never change them, since a failed save puts the same changes back.
        """
        if not self.reread:
            return list(self.turns.values())  # type: ignore[arg-type]  # no None in it
        turns = (
            thread.get_turn(turn_id) if turn is None else turn
            for turn_id, turn in self.turns.items()
        )
        return [turn for turn in turns if turn is not None]


class ChangeRecorder:
    """A JournalWriter that keeps a thread's mutations in order until a store takes them.

    Owned by one Thread and the store that bound it; like the Thread, it is used from
    one task at a time. `version` is the stored version the thread was loaded at or
    last saved as (what a compare-and-set save compares with; None: unknown).
    """

    __slots__ = ("_changes", "version")

    def __init__(self, version: object = None) -> None:
        self._changes: list[Change] = []
        self.version = version

    def add_turn(self, turn: Turn, tip: str | None = None) -> None:
        """Record an added or replaced turn; a Thread hands its writer a copy of its own."""
        self._changes.append(AddTurn(turn, tip))

    def update_tip(self, tip: str) -> None:
        """Record a tip move."""
        self._changes.append(SetTip(tip))

    def update_control(self, turn_id: str, control: str) -> None:
        """Record a control change."""
        self._changes.append(SetControl(turn_id, control))

    def update_parent(self, turn_id: str, parent_id: str) -> None:
        """Record a re-parenting."""
        self._changes.append(SetParent(turn_id, parent_id))

    def update_meta(self, key: str, value: str | None) -> None:
        """Record a metadata set (or delete when `value` is None)."""
        self._changes.append(SetMeta(key, value))

    def take(self) -> list[Change]:
        """Every change recorded so far, oldest first; the recorder starts empty again."""
        changes, self._changes = self._changes, []
        return changes

    def restore(self, changes: Sequence[Change]) -> None:
        """Put back changes a failed save took, ahead of anything recorded since."""
        self._changes[:0] = changes


class _Pending:
    """What `ChangeTracker.pending` returns: the changes, put back if the save fails.

    A plain class rather than `@contextmanager`: it runs on every save, and a
    generator-based context manager costs several calls more.
    """

    __slots__ = ("_changes", "_recorder")

    def __init__(self, recorder: ChangeRecorder | None) -> None:
        self._recorder = recorder
        self._changes = None if recorder is None else recorder.take()

    def __enter__(self) -> list[Change] | None:
        return self._changes

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if exc_type is not None and self._recorder is not None and self._changes is not None:
            self._recorder.restore(self._changes)


class ChangeTracker:
    """The recorders one store bound to the Threads it handed out.

    Held weakly: a Thread the caller dropped takes its recorder with it. A Thread the
    tracker does not know (built elsewhere, or from another store) has no pending
    changes to offer, and the store writes it in full. Rebinding a tracked Thread to
    another journal hides its later changes from the store: don't.
    """

    __slots__ = ("_recorders",)

    def __init__(self) -> None:
        # Each recorder also keeps the stored version its Thread was loaded at (or
        # last saved as): one weak lookup per question on the save path.
        self._recorders: weakref.WeakKeyDictionary[Thread, ChangeRecorder] = (
            weakref.WeakKeyDictionary()
        )

    def track(self, thread: Thread, version: object = None) -> Thread:
        """Bind a fresh recorder to `thread`, remember it and the stored `version` it
        was loaded at; returns `thread`."""
        recorder = ChangeRecorder(version)
        thread.bind(recorder)
        self._recorders[thread] = recorder
        return thread

    def recorder(self, thread: Thread) -> ChangeRecorder | None:
        """The recorder bound to `thread` (None: untracked), for a store's save to take
        the changes, put them back on failure and keep the new version itself (one
        lookup instead of one per step)."""
        return self._recorders.get(thread)

    def version(self, thread: Thread) -> object:
        """The stored version `thread` was loaded at or last saved as (None: unknown)."""
        recorder = self._recorders.get(thread)
        return None if recorder is None else recorder.version

    def saved(self, thread: Thread, version: object) -> None:
        """`thread` was just saved and the store now holds `version` of it."""
        recorder = self._recorders.get(thread)
        if recorder is not None:
            recorder.version = version

    def pending(self, thread: Thread) -> _Pending:
        """A context manager giving the changes to save (None for an untracked Thread);
        they are put back if the block raises."""
        return _Pending(self._recorders.get(thread))


def replay(changes: Sequence[Change], writer: JournalWriter) -> None:
    """Write `changes` to a real journal: exactly the entries a bound thread would have."""
    for change in changes:
        match change:
            case AddTurn(turn=turn, tip=tip):
                writer.add_turn(turn, tip)
            case SetTip(tip=tip):
                writer.update_tip(tip)
            case SetControl(turn_id=turn_id, control=control):
                writer.update_control(turn_id, control)
            case SetParent(turn_id=turn_id, parent_id=parent_id):
                writer.update_parent(turn_id, parent_id)
            case SetMeta(key=key, value=value):
                writer.update_meta(key, value)
