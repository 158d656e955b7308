"""Thread: a conversation as a branchable tree of turns, and the State protocol it meets."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import Protocol, runtime_checkable

import structlog

from ore_core.artifacts import Artifact
from ore_core.errors import LedgerError, TurnNotFound
from ore_core.ledger.clock import Clock, SystemClock
from ore_core.ledger.journal import JournalWriter, Repository
from ore_core.ledger.meta import Meta
from ore_core.turn import Role, TraversalControl, Turn, generate_turn_id

__all__ = ["State", "Thread"]

_log = structlog.get_logger("ore.ledger")

# Turns saved without a timestamp sort before every stamped one.
_EARLIEST = datetime.min.replace(tzinfo=UTC)


@runtime_checkable
class State(Protocol):
    """What a turn loop reads and appends to: a Thread, a Buffer, or a projection of one."""

    def turns(self) -> list[Turn]:
        """The conversation as the model sees it, oldest first, as copies."""
        ...

    def append(self, role: Role | str, *artifacts: Artifact, event_id: str = "") -> Turn:
        """Add a turn at the end of the conversation; returns it."""
        ...

    def meta(self) -> Meta:
        """The live metadata handle (every handle sees the same storage)."""
        ...


class Thread:
    """The conversation tree: every turn ever stored plus `current_tip`, the active branch.

    `append` parents the new turn on the tip and advances the tip; `turns()` walks back
    from the tip (continue: include and go on, stop: include and end, skip: leave out
    and go on; a missing parent or a parent loop ends the walk). Nothing is ever
    deleted: `fork`, `undo` and `set_current_tip` only move the tip, so every branch
    stays stored and reachable through `all_turns()` and `branches()`.

    Turns going in and out are copies: changing a returned Turn never changes the
    thread. When a `JournalWriter` is bound, each mutation is journaled with exactly
    one writer call *before* it is applied, so a writer that raises leaves the thread
    as it was. Building from the journal (`from_journal`) never journals again.

    Not thread-safe and not re-entrant by contract: one asyncio task (the thread's
    Stream worker) owns a Thread; others read it only through that owner.
    """

    def __init__(
        self,
        thread_id: str = "",
        *,
        clock: Clock | None = None,
        journal: JournalWriter | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> None:
        self.id = thread_id
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._journal = journal
        self._meta_journal = _MetaJournal(journal)
        self._turns: dict[str, Turn] = {}
        self._tip = ""
        # event id -> ids of the turns recorded from it, so has_event is O(1).
        self._events: dict[str, set[str]] = {}
        # Initial metadata is the caller's starting point, not a change: not journaled.
        self._meta = Meta(dict(metadata or {}), listener=self._meta_journal)

    def __repr__(self) -> str:
        return f"Thread(id={self.id!r}, turns={len(self._turns)}, tip={self._tip!r})"

    def __len__(self) -> int:
        """Number of stored turns, on every branch."""
        return len(self._turns)

    @property
    def current_tip(self) -> str:
        """Id of the turn the active path is walked back from ("" when empty)."""
        return self._tip

    # -- State ---------------------------------------------------------------------------

    def turns(self) -> list[Turn]:
        """The active path (see `resolve_active_path`); the State protocol's view."""
        return self.resolve_active_path()

    def append(
        self,
        role: Role | str,
        *artifacts: Artifact,
        event_id: str = "",
        extra: tuple[tuple[str, str], ...] = (),
    ) -> Turn:
        """Store a new turn under the tip, stamped by the clock, and make it the tip.

        `event_id` records the ingress event the turn came from (see `has_event`),
        `extra` further metadata of the turn (`Turn.extra`). Returns the stored turn.
        """
        turn_id = generate_turn_id()
        while turn_id in self._turns:  # 64 random bits: a clash would overwrite a turn
            turn_id = generate_turn_id()
        turn = Turn(
            turn_id,
            role,
            artifacts,
            parent_id=self._tip,
            timestamp=self._clock.now(),
            event_id=event_id,
            extra=extra,
        )
        if self._journal is not None:
            self._journal.add_turn(turn, tip=turn_id)
        self._store(turn)
        self._tip = turn_id
        return turn

    def meta(self) -> Meta:
        """The live metadata handle; `set`/`delete` are journaled when the thread is bound."""
        return self._meta

    # -- reading ---------------------------------------------------------------------------

    def get_turn(self, turn_id: str) -> Turn | None:
        """The stored turn, or None when the thread has no such turn."""
        return self._turns.get(turn_id)

    def all_turns(self) -> list[Turn]:
        """Every stored turn on every branch, in the order they were first stored."""
        return list(self._turns.values())

    def resolve_active_path(self) -> list[Turn]:
        """The turns on the active path, oldest first (a new list). O(n), ends on a loop."""
        path = list(self._walk())
        path.reverse()
        return path

    def branches(self) -> list[Turn]:
        """The leaves (turns no other turn names as parent), oldest first."""
        named = {turn.parent_id for turn in self._turns.values() if turn.parent_id != turn.id}
        leaves = [turn for turn in self._turns.values() if turn.id not in named]
        leaves.sort(key=_age)
        return leaves

    def has_event(self, event_id: str) -> bool:
        """True when some stored turn was recorded from ingress event `event_id`."""
        return bool(event_id) and event_id in self._events

    # -- changing the tree -------------------------------------------------------------------

    def save_turn(self, turn: Turn) -> None:
        """Insert `turn`, or replace the stored turn with its id; the tip stays."""
        if self._journal is not None:
            self._journal.add_turn(turn)
        self._store(turn)

    def set_current_tip(self, turn_id: str) -> None:
        """Point the active path at `turn_id`, verbatim (use `fork` to insist it exists)."""
        if self._journal is not None:
            self._journal.update_tip(turn_id)
        self._tip = turn_id

    def set_parent(self, turn_id: str, parent_id: str) -> None:
        """Re-parent a stored turn (`parent_id` verbatim); no-op when `turn_id` is unknown."""
        turn = self._turns.get(turn_id)
        if turn is None:
            return
        if self._journal is not None:
            self._journal.update_parent(turn_id, parent_id)
        self._turns[turn_id] = replace(turn, parent_id=parent_id)

    def set_control(self, turn_id: str, control: TraversalControl | str) -> None:
        """Set how the walk treats a stored turn; no-op when `turn_id` is unknown.

        Raises LedgerError for a value that is not a TraversalControl, so a typo cannot
        silently behave as `continue`.
        """
        try:
            value = TraversalControl(control)
        except ValueError:
            raise LedgerError(
                f"unknown traversal control {control!r} for turn {turn_id!r} in thread "
                f"{self.id!r}: use one of {[str(c) for c in TraversalControl]}"
            )
        turn = self._turns.get(turn_id)
        if turn is None:
            return
        if self._journal is not None:
            self._journal.update_control(turn_id, value)
        self._turns[turn_id] = replace(turn, control=value)

    def fork(self, turn_id: str) -> None:
        """Move the tip to an existing turn so the next `append` starts a new branch there.

        `""` empties the tip: the next `append` starts a new root (a branch beside the
        first message, e.g. when that message is edited).
        """
        if turn_id and turn_id not in self._turns:
            raise TurnNotFound(
                f"cannot fork thread {self.id!r} at turn {turn_id!r}: no such turn "
                "(`ore threads show ID --all-branches` lists the turn ids)"
            )
        self.set_current_tip(turn_id)

    def undo(self) -> str:
        """Drop the last exchange from the active path; returns the new tip.

        The tip moves to the parent of the most recent user turn on the active path;
        the undone turns stay stored (a branch). Without a user turn nothing changes.
        """
        latest_user = next((turn for turn in self._walk() if turn.role == Role.USER), None)
        if latest_user is None:
            return self._tip
        self.set_current_tip(latest_user.parent_id)
        return self._tip

    # -- journal -------------------------------------------------------------------------------

    def bind(self, journal: JournalWriter | None) -> None:
        """Journal every later mutation through `journal` (None unbinds). Journals nothing now."""
        self._journal = journal
        self._meta_journal.journal = journal

    @classmethod
    def from_journal(
        cls,
        repository: Repository,
        thread_id: str,
        *,
        bind: bool = True,
        clock: Clock | None = None,
    ) -> Thread:
        """Rebuild a thread by replaying its journal; then bind its writer unless `bind=False`.

        An absent journal gives an empty thread. A journal whose replay stopped early (a
        torn or garbage entry) gives the state before that entry and logs a warning.
        """
        state = repository.hydrate(thread_id)
        if state.problem is not None:
            _log.warning(
                "journal replay stopped early",
                thread_id=thread_id,
                entries=state.entries,
                problem=state.problem,
            )
        thread = cls(thread_id, clock=clock, metadata=state.meta)
        for turn in state.turns.values():
            thread.save_turn(turn)
        thread.set_current_tip(state.tip)
        if bind:
            thread.bind(repository.writer(thread_id))
        return thread

    # -- internals -------------------------------------------------------------------------------

    def _walk(self) -> Iterator[Turn]:
        """The stored (not copied) turns of the active path, tip first."""
        seen: set[str] = set()
        current = self._tip
        while current:
            if current in seen:
                _log.warning(
                    "parent loop in thread: active path ends at the first revisited turn",
                    thread_id=self.id,
                    turn_id=current,
                )
                return
            seen.add(current)
            turn = self._turns.get(current)
            if turn is None:
                return
            if turn.control == TraversalControl.SKIP:
                current = turn.parent_id
                continue
            yield turn
            if turn.control == TraversalControl.STOP:
                return
            current = turn.parent_id

    def _store(self, turn: Turn) -> None:
        """Put `turn` in the tree, keeping the event index in step with replacements."""
        previous = self._turns.get(turn.id)
        if previous is not None and previous.event_id:
            recorded = self._events[previous.event_id]
            recorded.discard(previous.id)
            if not recorded:
                del self._events[previous.event_id]
        self._turns[turn.id] = turn
        if turn.event_id:
            self._events.setdefault(turn.event_id, set()).add(turn.id)


class _MetaJournal:
    """The metadata's listener: journals a change when the thread is bound.

    Not a bound method of the Thread: that would make thread -> meta -> thread a reference
    cycle, and a dropped thread (a closed stream's, with every turn it holds) would wait
    for the collector's next full pass instead of being freed at once.
    """

    __slots__ = ("journal",)

    def __init__(self, journal: JournalWriter | None) -> None:
        self.journal = journal

    def __call__(self, key: str, value: str | None) -> None:
        if self.journal is not None:
            self.journal.update_meta(key, value)


def _age(turn: Turn) -> tuple[datetime, str]:
    """Sort key: timestamp (a naive one read as UTC, a missing one earliest), then id."""
    stamp = turn.timestamp
    if stamp is None:
        return _EARLIEST, turn.id
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=UTC)
    return stamp, turn.id
