"""LoopCommitter: a lone save committed on the event loop, without a thread hop.

Handing a save to the store's worker thread costs two thread wake-ups (loop to worker,
worker back to the loop) and a loop iteration: at one conversation that is most of
what a save costs (measured: the session layer's CPU per turn 211 -> 134 µs). An
uncontended commit without fsync is a write into the page cache, tens of
microseconds, so a lone save is better committed right where it is made.

What keeps the loop from ever waiting on SQLite:
- this connection has no busy timeout: when another connection (the worker, another
  process) holds the write lock, `BEGIN IMMEDIATE` fails at once and the save goes
  to the worker, which waits for the lock there;
- the store only asks when its worker is idle, for small saves, and not when the
  commit would be fsynced (`fsync = "always"`);
- only a lone save: the first of its loop iteration, when the last iteration that
  saved anything saved only once. The saves of a burst, and every save while bursts
  go on (many conversations at once), go to the worker and share its group commits,
  which is what makes many concurrent saves cheap: committing each of them here
  measured 1.22x the core's CPU per turn at 100 conversations.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from typing import TypeVar

__all__ = ["LoopCommitter"]

_R = TypeVar("_R")


class LoopCommitter:
    """Commits `write(cursor)` on the calling (loop) thread when it can do so at once.

    The store asks `lone` for every save (also one it must give its worker anyway:
    every save counts) and calls `commit` only when that said True and the save is
    otherwise eligible. `commit` returns `(True, result)` when it committed, `(False,
    None)` when the write lock is taken and the caller should hand the save to its
    worker instead. An error of `write` itself, or of the commit, is raised after
    rolling the transaction back.
    """

    def __init__(self, path: str, *, synchronous: str, autocheckpoint: int) -> None:
        self._path = path
        self._synchronous = synchronous
        self._autocheckpoint = autocheckpoint
        self._cursor: sqlite3.Cursor | None = None
        self._saves = 0  # saves asked for in this loop iteration
        self._burst = False  # the last loop iteration with saves had more than one

    def lone(self) -> bool:
        """Count a save: True when it is the first of its loop iteration and the last
        iteration that saved anything saved only once (a burst goes to the worker)."""
        self._saves += 1
        if self._saves > 1:  # `_next_iteration` marks the burst
            return False
        asyncio.get_running_loop().call_soon(self._next_iteration)
        return not self._burst

    def commit(self, write: Callable[[sqlite3.Cursor], _R]) -> tuple[bool, _R | None]:
        """Run `write` in a transaction of its own and commit it, unless that would wait."""
        try:
            cursor = self._cursor or self._open()
            cursor.execute("BEGIN IMMEDIATE")
        except sqlite3.Error:  # locked by another writer (or unusable): the worker waits
            return False, None
        try:
            result = write(cursor)
            cursor.execute("COMMIT")
        except BaseException:
            if cursor.connection.in_transaction:  # SQLite rolls back some errors itself
                cursor.connection.execute("ROLLBACK")
            raise
        return True, result

    def close(self) -> None:
        """Close the connection (idempotent); `commit` opens a new one if asked again."""
        cursor, self._cursor = self._cursor, None
        if cursor is not None:
            cursor.connection.close()

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

    def _next_iteration(self) -> None:
        self._burst = self._saves > 1
        self._saves = 0
