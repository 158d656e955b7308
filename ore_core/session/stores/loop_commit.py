"""LoopCommitter: a loop iteration's saves committed together on the event loop.

Handing saves to the store's worker thread costs two thread wake-ups per loop
iteration that saves (loop to worker, worker back to the loop), the GIL passed back
and forth while the worker's SQLite calls release and retake it, and a loop iteration
for the answer: at 100 conversations the worker thread was a third of the core's
context switches per turn. An uncontended commit without fsync is a write into the
page cache, tens of microseconds for a save and not much more for a hundred in one
transaction, so the saves of a loop iteration are committed together where they are
made, at the end of that iteration (what the hand-written floor of
`bench/hotpath.py` does). A lone save (the first of its iteration, after an iteration
that saved at most once: one conversation) is committed at once instead, so its
caller goes on without waiting for the loop to come round; while bursts go on, every
save waits for its iteration's commit.

What keeps the loop from ever waiting on SQLite:
- this connection has no busy timeout: when another connection (the worker, another
  process) holds the write lock, `BEGIN IMMEDIATE` fails at once and the saves go to
  the worker, which waits for the lock there;
- the store only asks while its worker is idle, for small saves, and not when the
  commit would be fsynced (`fsync = "always"`); an iteration's saves past
  `MAX_BYTES` go to the worker.
A group that fails is rolled back; a save alone gets its error, the saves of a larger
group go to the worker, which retries a failing group's saves one by one (one
definition of that, the worker's).
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["LoopCommitter", "Outcome"]

_R = TypeVar("_R")

Outcome = tuple[bool, _R | None]
"""`(True, result)` once committed on the loop; `(False, None)`: hand it to the worker."""


class _Save(Generic[_R]):
    """A write waiting for its iteration's commit, and the future its caller awaits."""

    __slots__ = ("future", "write")

    def __init__(self, write: Callable[[sqlite3.Cursor], _R], loop: asyncio.AbstractEventLoop):
        self.write = write
        self.future: asyncio.Future[Outcome[_R]] = loop.create_future()


class LoopCommitter:
    """Commits the writes of one loop iteration in one transaction at its end (a lone
    one at once).

    `add(write, size)` returns the future of `write(cursor)`'s outcome (done already
    for a lone save), or None when the iteration's saves already hold `MAX_BYTES` (the
    caller hands it to its worker).
    `on_commit` is called after every commit made here (the store nudges its WAL
    checkpointer).
    """

    MAX_BYTES = 256 * 1024  # of turns' JSON per iteration: a longer commit holds the loop

    def __init__(
        self,
        path: str,
        *,
        synchronous: str,
        autocheckpoint: int,
        on_commit: Callable[[], None] = lambda: None,
    ) -> None:
        self._path = path
        self._synchronous = synchronous
        self._autocheckpoint = autocheckpoint
        self._on_commit = on_commit
        self._cursor: sqlite3.Cursor | None = None
        self._saves: list[_Save[object]] = []  # this iteration's, committed at its end
        self._bytes = 0
        self._count = 0  # saves asked for in this loop iteration
        self._burst = False  # the last loop iteration with saves had more than one

    def add(
        self, write: Callable[[sqlite3.Cursor], _R], size: int
    ) -> asyncio.Future[Outcome[_R]] | None:
        """Commit `write` at once when it is a lone save, else queue it for this
        iteration's commit; None when the iteration is full (the worker takes it)."""
        if self._bytes + size > self.MAX_BYTES and self._saves:
            return None
        loop = asyncio.get_running_loop()
        save = _Save(write, loop)
        self._count += 1
        if self._count == 1:
            loop.call_soon(self._end_iteration)
            if not self._burst:  # lone: its caller resumes without waiting for the loop
                self._commit([save])  # type: ignore[list-item]
                return save.future
        if not self._saves:
            loop.call_soon(self._commit_queued)
        self._saves.append(save)  # type: ignore[arg-type]  # its future is only settled here
        self._bytes += size
        return save.future

    def close(self) -> None:
        """Close the connection (idempotent); a later commit opens a new one."""
        cursor, self._cursor = self._cursor, None
        if cursor is not None:
            cursor.connection.close()

    def _end_iteration(self) -> None:
        self._burst = self._count > 1
        self._count = 0

    def _commit_queued(self) -> None:
        saves, self._saves, self._bytes = self._saves, [], 0
        self._commit([save for save in saves if not save.future.cancelled()])

    def _commit(self, saves: list[_Save[object]]) -> None:
        """`saves` in one transaction; each future gets its outcome."""
        if not saves:
            return
        try:
            cursor = self._cursor or self._open()
            cursor.execute("BEGIN IMMEDIATE")
        except sqlite3.Error:  # locked by another writer (or unusable): the worker waits
            _settle(saves, None)
            return
        try:
            results = [save.write(cursor) for save in saves]
            cursor.execute("COMMIT")
        except BaseException as exc:
            if cursor.connection.in_transaction:  # SQLite rolls back some errors itself
                cursor.connection.execute("ROLLBACK")
            if not isinstance(exc, Exception):
                raise
            if len(saves) == 1:
                saves[0].future.set_exception(exc)
            else:  # the worker finds which save failed
                _settle(saves, None)
            return
        _settle(saves, results)
        self._on_commit()

    def _open(self) -> sqlite3.Cursor:
        # The worker's connection made the file, the WAL and the schema: this one only
        # writes rows. `check_same_thread=False`: a store may be closed from another thread.
        conn = sqlite3.connect(self._path, timeout=0, isolation_level=None, check_same_thread=False)
        try:
            conn.execute("PRAGMA busy_timeout = 0")
            conn.execute(f"PRAGMA synchronous = {self._synchronous}")
            conn.execute(f"PRAGMA wal_autocheckpoint = {self._autocheckpoint}")
        except BaseException:
            conn.close()
            raise
        self._cursor = conn.cursor()
        return self._cursor


def _settle(saves: list[_Save[object]], results: list[object] | None) -> None:
    """Committed (`results`, in order) or left to the worker (None)."""
    for index, save in enumerate(saves):
        if not save.future.done():
            save.future.set_result((False, None) if results is None else (True, results[index]))
