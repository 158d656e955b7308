"""Journal repositories: the shared per-thread calls, and the in-memory repository."""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

from ore_core.jsonutil import dumps, loads
from ore_core.ledger.clock import Clock, SystemClock
from ore_core.ledger.entries import Entry, EntryWriter, replay
from ore_core.ledger.journal import JournalState, JournalWriter
from ore_core.turn import Turn

__all__ = ["JournalRepository", "MemoryRepository"]


class JournalRepository(ABC):
    """Base of the repositories: the `Repository` calls that name a thread go through
    that thread's `writer`, so a direct call and a bound Thread journal the same way."""

    @abstractmethod
    def writer(self, thread_id: str) -> JournalWriter:
        """The writer bound to `thread_id` (the same object for repeated calls)."""

    def save_turn(self, thread_id: str, turn: Turn) -> None:
        """Append `add_turn` (does not move the tip: journal `update_tip` too)."""
        self.writer(thread_id).add_turn(turn)

    def update_tip(self, thread_id: str, tip: str) -> None:
        """Append `update_tip`."""
        self.writer(thread_id).update_tip(tip)

    def update_control(self, thread_id: str, turn_id: str, control: str) -> None:
        """Append `update_control`."""
        self.writer(thread_id).update_control(turn_id, control)

    def update_parent(self, thread_id: str, turn_id: str, parent_id: str) -> None:
        """Append `update_parent`."""
        self.writer(thread_id).update_parent(turn_id, parent_id)


class MemoryRepository(JournalRepository):
    """Journals kept in memory: for tests and threads that need not outlive the process.

    Entries are stored serialised, exactly as a file would hold them, so replay sees
    what the file repository would see and nobody can change a stored entry through
    an object they still hold. Every method takes one lock: safe to call from several
    threads, and from asyncio code (no call blocks for longer than a list operation).
    """

    def __init__(self, *, clock: Clock | None = None) -> None:
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._lock = threading.Lock()
        self._journals: dict[str, list[bytes]] = {}
        self._writers: dict[str, EntryWriter] = {}

    def writer(self, thread_id: str) -> JournalWriter:
        """The writer bound to `thread_id` (the same object for repeated calls)."""
        with self._lock:
            writer = self._writers.get(thread_id)
            if writer is None:
                writer = EntryWriter(partial(self.append, thread_id), self._clock)
                self._writers[thread_id] = writer
            return writer

    def append(self, thread_id: str, entries: Sequence[Mapping[str, Any]]) -> None:
        """Append entries as given, all together: what writers do, and how tests plant
        entries a writer would never produce (garbage, unknown tx types)."""
        lines = [dumps(entry) for entry in entries]
        with self._lock:
            self._journals.setdefault(thread_id, []).extend(lines)

    def journal(self, thread_id: str) -> list[Entry]:
        """Fresh copies of the thread's entries in append order ([] when it has none)."""
        with self._lock:
            lines = list(self._journals.get(thread_id, ()))
        return [loads(line) for line in lines]

    def hydrate(self, thread_id: str) -> JournalState:
        """Replay the thread's journal; stops quietly at the first bad entry."""
        return replay(self.journal(thread_id))

    def exists(self, thread_id: str) -> bool:
        """True when the thread has at least one entry."""
        with self._lock:
            return bool(self._journals.get(thread_id))

    def delete(self, thread_id: str) -> bool:
        """Forget the thread's entries; True when it had any. Its writer stays usable."""
        with self._lock:
            return bool(self._journals.pop(thread_id, None))

    def thread_ids(self) -> list[str]:
        """Ids of every thread with entries, sorted."""
        with self._lock:
            return sorted(key for key, lines in self._journals.items() if lines)

    def flush(self) -> None:
        """Nothing to do: memory is as durable as it gets."""

    def close(self) -> None:
        """Nothing to release; the entries stay readable."""
