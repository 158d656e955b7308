"""JournalStore: threads as append-only `.jsonl` journals (the ledger's FileRepository).

Design: copies, not a live thread. `get` replays the journal into a new, unbound
Thread and binds a `ChangeRecorder` to it; `save` appends the recorded changes to the
thread's journal writer, so the file receives exactly the entries a bound thread
would have written (saving after one more turn appends the two lines of that turn)
and nothing reaches the file before `save`. Copies are therefore independent, and
two copies can never write the same change twice. Saves are compare-and-set on the
journal's length: a copy remembers the length it was read at, and a save (holding
the journal's lock) from a copy whose journal grew meanwhile, in this process or
another, raises StaleThread and appends nothing.

Durability is the repository's fsync policy (`always`, `batch`, `never`), not `save`'s:
with `batch` a power loss can cost the last fraction of a second. Each journal is
locked by the process that writes it (FileRepository's flock), so two processes
cannot interleave one thread; `JournalLocked` surfaces as a StoreError (the save
wrote nothing: a bus worker retries the message later).

`get_by` uses an in-memory metadata index built on first use by replaying every
journal (O(total journal size), once per process) and kept current by this store's
own saves. Threads written meanwhile by another process are seen after a restart.
"""

from __future__ import annotations

import builtins
import os
import resource
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from ore_core.errors import LedgerError, ThreadCorrupt, ThreadNotFound
from ore_core.ids import generate_thread_id, is_valid_thread_id
from ore_core.ledger.file_repository import FileRepository, FsyncPolicy
from ore_core.ledger.journal import JournalState
from ore_core.ledger.thread import Thread
from ore_core.session.stores.base import BaseStore, probe_directory
from ore_core.session.stores.changes import (
    AddTurn,
    Change,
    ChangeSet,
    ChangeTracker,
    SetMeta,
    SetTip,
    replay,
)
from ore_core.session.stores.thread_json import build_thread, ordered_turns
from ore_core.session.stores.worker import SerialWorker
from ore_core.turn import Turn

__all__ = ["JournalStore", "Snapshot"]

_R = TypeVar("_R")


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A thread's full state, taken on the loop for a save that must write everything."""

    turns: list[Turn]
    tip: str
    metadata: dict[str, str]

    @classmethod
    def of(cls, thread: Thread) -> Snapshot:
        return cls(ordered_turns(thread.all_turns()), thread.current_tip, thread.meta().all())

    def changes_since(self, state: JournalState | None) -> list[Change]:
        """The entries that turn `state` (None: no journal yet) into this snapshot."""
        base = state if state is not None else JournalState()
        changes: list[Change] = [
            AddTurn(turn, None) for turn in self.turns if base.turns.get(turn.id) != turn
        ]
        # A new journal always gets its tip entry, so even an empty thread has a file.
        if state is None or self.tip != base.tip:
            changes.append(SetTip(self.tip))
        changes.extend(
            SetMeta(key, value)
            for key, value in self.metadata.items()
            if base.meta.get(key) != value
        )
        changes.extend(SetMeta(key, None) for key in base.meta if key not in self.metadata)
        return changes


@dataclass(slots=True)
class _MetaIndex:
    """thread id -> metadata, and (key, value) -> thread ids: what get_by looks up."""

    by_thread: dict[str, dict[str, str]] = field(default_factory=dict)
    by_pair: dict[tuple[str, str], set[str]] = field(default_factory=dict)

    def put(self, thread_id: str, metadata: Mapping[str, str]) -> None:
        self.drop(thread_id)
        for key, value in metadata.items():
            self.change(thread_id, key, value)

    def change(self, thread_id: str, key: str, value: str | None) -> None:
        metadata = self.by_thread.setdefault(thread_id, {})
        old = metadata.pop(key, None)
        if old is not None:
            self.by_pair[key, old].discard(thread_id)
        if value is not None:
            metadata[key] = value
            self.by_pair.setdefault((key, value), set()).add(thread_id)

    def drop(self, thread_id: str) -> None:
        for key, value in self.by_thread.pop(thread_id, {}).items():
            self.by_pair[key, value].discard(thread_id)

    def find(self, key: str, value: str) -> list[str]:
        return sorted(self.by_pair.get((key, value), ()))


def _default_max_open() -> int:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 4096
    return min(max(soft // 4, 256), 4096)


class JournalStore(BaseStore):
    """Threads as append-only journals in `directory`, one `<id>.jsonl` per thread.

    Saves are O(changes); `get` is O(journal length). Every repository call runs on one
    dedicated worker thread, so the loop never waits on the disk and create's
    check-then-write cannot race within the process. At most `max_open` journals stay
    open (and locked) at a time: the least recently written one is released first.
    Releasing costs an fsync and reopening a re-read of the file, so `max_open` must
    exceed the number of threads written in turn: by default it is a quarter of the
    process's open-file limit, between 256 and 4096.
    """

    name = "journal"

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        fsync: FsyncPolicy | str = FsyncPolicy.BATCH,
        lock_timeout: float = 2.0,
        max_open: int | None = None,
    ) -> None:
        self.repository = FileRepository(directory, fsync=fsync, lock_timeout=lock_timeout)
        super().__init__(f"journal:{self.repository.directory}")
        self._worker = SerialWorker("ore-journal")
        # Threads whose journal is open (and flocked), least recently written first.
        self._open: OrderedDict[str, None] = OrderedDict()
        self._max_open = max(_default_max_open() if max_open is None else max_open, 1)
        self._index: _MetaIndex | None = None  # built on the worker by the first get_by
        self._tracker = ChangeTracker()

    # -- Store ------------------------------------------------------------------------------

    async def create(
        self, thread_id: str | None = None, metadata: Mapping[str, str] | None = None
    ) -> Thread:
        """Start a journal for a new empty thread; ThreadExists when the id has one."""
        thread_id = generate_thread_id() if thread_id is None else thread_id
        snapshot = Snapshot([], "", dict(metadata or {}))
        length = await self._run(self._create, self._checked_id(thread_id), snapshot)
        return self._hand_out(thread_id, snapshot.turns, "", snapshot.metadata, length)

    async def get(self, thread_id: str) -> Thread:
        """Replay the journal into a new Thread (a torn tail after a crash is left out)."""
        state, length = await self._run(self._load, self._checked_id(thread_id))
        return self._hand_out(thread_id, state.turns.values(), state.tip, state.meta, length)

    async def get_by(self, key: str, value: str) -> Thread:
        """The lowest-id thread whose metadata has `key` == `value` (an index lookup)."""
        self._check_open()
        found = await self._run(self._find, key, value)
        if found is None:
            raise self._no_match(key, value)
        thread_id, (state, length) = found
        return self._hand_out(thread_id, state.turns.values(), state.tip, state.meta, length)

    async def save(self, thread: Thread) -> None:
        """Append the changes since load or last save (a foreign Thread: its difference).

        With no changes it touches nothing. StaleThread (nothing appended) when the
        journal grew since this copy was read.
        """
        thread_id = self._checked_id(thread.id)
        with self._tracker.pending(thread) as changes:
            if changes == []:
                return
            if changes is not None:
                expected = self._tracker.version(thread)
                length = await self._run(self._append, thread_id, changes, expected)
                if length is not None:
                    self._tracker.saved(thread, length)
                    return
            # Untracked, or the journal was deleted meanwhile (changes alone: a fragment).
            length = await self._run(self._write_difference, thread_id, Snapshot.of(thread))
            self._tracker.saved(thread, length)

    async def delete(self, thread_id: str) -> bool:
        """Remove the thread's journal; True when there was one."""
        return await self._run(self._delete, self._checked_id(thread_id))

    async def close(self) -> None:
        """Flush per the fsync policy, unlock and close every journal. Idempotent."""
        if self._closed:
            return
        await super().close()
        try:
            await self._worker.close(self.repository.close)
        except (LedgerError, OSError) as exc:  # a failed final fsync: data may be lost
            raise self._failed(exc) from exc

    async def check(self) -> None:
        """StoreError unless a file can be written in the journal directory now."""
        self._check_open()
        await self._run(probe_directory, self.repository.directory)

    async def _thread_ids(self) -> builtins.list[str]:
        return await self._run(self._scan_ids)

    # -- on the loop ---------------------------------------------------------------------------

    async def _run(self, func: Callable[..., _R], *args: object) -> _R:
        try:
            return await self._worker.run(func, *args)
        except (LedgerError, OSError) as exc:
            raise self._failed(exc) from exc

    def _hand_out(
        self,
        thread_id: str,
        turns: Iterable[Turn],
        tip: str,
        metadata: Mapping[str, str],
        length: int | None,
    ) -> Thread:
        """The caller's Thread, tracked so that `save` appends only what changes, and
        only onto the journal `length` bytes long it was read from."""
        return self._tracker.track(build_thread(thread_id, turns, tip, metadata), length)

    # -- on the worker thread ----------------------------------------------------------------------

    def _scan_ids(self) -> builtins.list[str]:
        return [i for i in self.repository.thread_ids() if is_valid_thread_id(i)]

    def _create(self, thread_id: str, snapshot: Snapshot) -> int | None:
        if self.repository.exists(thread_id):
            raise self._exists(thread_id)
        self._write(thread_id, snapshot.changes_since(None))
        return self.repository.locked_length(thread_id)

    def _load(self, thread_id: str) -> tuple[JournalState, int | None]:
        """The replayed journal and its length before the replay (a length taken first
        can only be too short: a save from this copy is then refused, never wrong)."""
        try:
            length: int | None = self.repository.path(thread_id).stat().st_size
        except FileNotFoundError:
            raise self._not_found(thread_id) from None
        state = self.repository.hydrate(thread_id)
        if state.problem is not None and state.entries == 0:
            raise ThreadCorrupt(
                f"thread {thread_id} in {self.location} is unreadable: journal "
                f"{self.repository.path(thread_id)} has no readable entry ({state.problem}); "
                "repair or delete the file"
            )
        if state.problem is not None:
            # A torn or bad tail is cut by the first write; cut it now, under the lock,
            # so the length this copy remembers is the one its save will find.
            length = self._locked_length(thread_id)
            state = self.repository.hydrate(thread_id)
        return state, length

    def _find(self, key: str, value: str) -> tuple[str, tuple[JournalState, int | None]] | None:
        for thread_id in self._metadata_index().find(key, value):
            try:
                return thread_id, self._load(thread_id)
            except (ThreadCorrupt, ThreadNotFound):
                continue
        return None

    def _metadata_index(self) -> _MetaIndex:
        if self._index is None:
            index = _MetaIndex()
            for thread_id in self._scan_ids():
                try:
                    index.put(thread_id, self._load(thread_id)[0].meta)
                except (ThreadCorrupt, ThreadNotFound):
                    continue
            self._index = index
        return self._index

    def _append(self, thread_id: str, changes: Sequence[Change], expected: object) -> int | None:
        """Append recorded changes if the journal is still `expected` bytes long (None:
        any length); the new length, or None (nothing written) when the journal is gone."""
        # The lock is held from here through the write: nobody else can append between.
        length = self._locked_length(thread_id)
        if length is None:
            return None
        if expected is not None and length != expected:
            raise self._stale(thread_id)
        self._write(thread_id, changes)
        return self.repository.locked_length(thread_id)

    def _write_difference(self, thread_id: str, snapshot: Snapshot) -> int | None:
        exists = self.repository.exists(thread_id)
        state = self.repository.hydrate(thread_id) if exists else None
        self._write(thread_id, snapshot.changes_since(state))
        return self.repository.locked_length(thread_id)

    def _write(self, thread_id: str, changes: Sequence[Change]) -> None:
        if not changes:
            return
        replay(changes, self.repository.writer(thread_id))
        self._opened(thread_id)
        if self._index is not None:
            for key, value in ChangeSet.of(changes).meta.items():
                self._index.change(thread_id, key, value)

    def _locked_length(self, thread_id: str) -> int | None:
        """The journal's length with its lock held (see FileRepository.locked_length)."""
        length = self.repository.locked_length(thread_id)
        if length is not None:
            self._opened(thread_id)
        return length

    def _opened(self, thread_id: str) -> None:
        """Count `thread_id` as open (and locked), releasing the least recent over the bound."""
        self._open[thread_id] = None
        self._open.move_to_end(thread_id)
        if len(self._open) > self._max_open:
            # Bound open files; a released journal is fsynced and reopened on its next write.
            stale, _ = self._open.popitem(last=False)
            self.repository.release(stale)

    def _delete(self, thread_id: str) -> bool:
        self._open.pop(thread_id, None)
        if self._index is not None:
            self._index.drop(thread_id)
        return self.repository.delete(thread_id)
