"""MemoryStore: threads in a dict, for tests and throw-away sessions."""

from __future__ import annotations

import builtins
import itertools
from collections.abc import Mapping
from dataclasses import dataclass

from ore_core import jsonutil
from ore_core.ids import generate_thread_id
from ore_core.ledger.thread import Thread
from ore_core.session.stores.base import BaseStore
from ore_core.session.stores.changes import ChangeSet, ChangeTracker
from ore_core.session.stores.thread_json import build_thread, ordered_turns
from ore_core.turn import Turn, turn_from_dict, turn_json

__all__ = ["MemoryStore"]


def _encode(turn: Turn) -> bytes:
    return turn_json(turn)  # encoded once per turn, shared with its event (bytes: immutable)


@dataclass(slots=True)
class _Saved:
    """A stored thread: every turn as its JSON (so no object is shared), tip, metadata."""

    turns: dict[str, bytes]
    tip: str
    metadata: dict[str, str]
    version: int

    @classmethod
    def of(cls, thread: Thread, version: int) -> _Saved:
        turns = {turn.id: _encode(turn) for turn in ordered_turns(thread.all_turns())}
        return cls(turns, thread.current_tip, thread.meta().all(), version)

    def apply(self, turns: Mapping[str, bytes], net: ChangeSet) -> None:
        self.turns.update(turns)
        if net.tip is not None:
            self.tip = net.tip
        for key, value in net.meta.items():
            if value is None:
                self.metadata.pop(key, None)
            else:
                self.metadata[key] = value

    def turn_list(self) -> list[Turn]:
        return [turn_from_dict(jsonutil.loads(raw)) for raw in self.turns.values()]


class MemoryStore(BaseStore):
    """Keeps threads in memory; nothing survives the process.

    Turns are kept as their JSON, so callers never share objects with the store or
    with each other, and a thread comes back exactly as a persistent store would
    return it (a delta is refused on save; a tool call's display becomes its
    rendering). Like SQLiteStore, `save` applies only what changed since the thread
    was handed out (O(changes)); a Thread from elsewhere replaces the stored one.
    Saves are compare-and-set: every stored thread carries a version (from one
    counter, so a deleted and recreated thread never repeats one) and saving a copy
    loaded at an older version raises StaleThread. No method awaits anything, so
    each is atomic on the event loop.
    """

    name = "memory"

    def __init__(self) -> None:
        super().__init__("memory")
        self._threads: dict[str, _Saved] = {}
        self._tracker = ChangeTracker()
        self._versions = itertools.count(1)

    async def create(
        self, thread_id: str | None = None, metadata: Mapping[str, str] | None = None
    ) -> Thread:
        """A new empty thread; ThreadExists when `thread_id` is taken."""
        thread_id = generate_thread_id() if thread_id is None else thread_id
        if self._checked_id(thread_id) in self._threads:
            raise self._exists(thread_id)
        self._threads[thread_id] = _Saved({}, "", dict(metadata or {}), next(self._versions))
        return self._hand_out(thread_id)

    async def get(self, thread_id: str) -> Thread:
        """A fresh copy of the stored thread."""
        if self._checked_id(thread_id) not in self._threads:
            raise self._not_found(thread_id)
        return self._hand_out(thread_id)

    async def get_by(self, key: str, value: str) -> Thread:
        """The lowest-id thread whose metadata has `key` == `value` (a linear scan)."""
        self._check_open()
        matches = [i for i, saved in self._threads.items() if saved.metadata.get(key) == value]
        if not matches:
            raise self._no_match(key, value)
        return self._hand_out(min(matches))

    async def save(self, thread: Thread) -> None:
        """Apply the thread's changes (ArtifactError for a delta, leaving the store as it was).

        With no changes it touches nothing. StaleThread when the stored thread changed
        since this copy was loaded.
        """
        thread_id = self._checked_id(thread.id)
        with self._tracker.pending(thread) as changes:
            if changes == []:
                return
            saved = self._threads.get(thread_id)
            version = next(self._versions)
            if changes is not None and saved is not None:
                if saved.version != self._tracker.version(thread):
                    raise self._stale(thread_id)
                net = ChangeSet.of(changes)
                saved.apply({turn.id: _encode(turn) for turn in net.changed_turns(thread)}, net)
                saved.version = version
            else:  # untracked, or deleted meanwhile
                self._threads[thread_id] = _Saved.of(thread, version)
            self._tracker.saved(thread, version)

    async def delete(self, thread_id: str) -> bool:
        """Drop the thread; True when it was stored."""
        return self._threads.pop(self._checked_id(thread_id), None) is not None

    async def _thread_ids(self) -> builtins.list[str]:
        return sorted(self._threads)

    def _hand_out(self, thread_id: str) -> Thread:
        saved = self._threads[thread_id]
        thread = build_thread(thread_id, saved.turn_list(), saved.tip, saved.metadata)
        return self._tracker.track(thread, saved.version)
