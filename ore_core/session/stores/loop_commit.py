"""LoopCommitter: small saves committed on the event loop, without a thread hop.

Handing a save to the store's worker thread costs two thread wake-ups (loop to worker,
worker back to the loop) and a loop iteration: at one conversation that is most of
what a save costs (measured: the session layer's CPU per turn 211 -> 134 µs). An
uncontended commit without fsync is a write into the page cache, tens of
microseconds, so a small save is better committed right where it is made:

- a lone save (the first of its loop iteration, when the last iteration that saved
  anything saved only once) is committed at once;
- the other saves of an iteration (many conversations at once) are committed together,
  in one transaction, by a callback that runs right after the iteration: one commit for
  all of them, as the worker's group commit, without its wake-ups. Committing each of
  them alone measured 1.22x the core's CPU per turn at 100 conversations; a group costs
  one BEGIN and one COMMIT.

What keeps the loop from ever waiting on SQLite:
- this connection has no busy timeout: when another connection (the worker, another
  process) holds the write lock, `BEGIN IMMEDIATE` fails at once and the saves go to
  the worker, which waits for the lock there;
- the store only asks for small saves, while its worker is idle, and never when the
  commit would be fsynced (`fsync = "always"`).
"""

from __future__ import annotations

import asyncio
import enum
import sqlite3
from collections.abc import Callable
from typing import Any, Final, TypeVar

__all__ = ["HANDED_BACK", "HandedBack", "LoopCommitter"]

_R = TypeVar("_R")


class HandedBack(enum.Enum):
    """What a save's future holds when it was not committed here: the caller hands it
    to the worker (the write lock was taken, or the committer closed meanwhile)."""

    HANDED_BACK = "handed back"


HANDED_BACK: Final = HandedBack.HANDED_BACK

_Write = Callable[[sqlite3.Cursor], Any]


class LoopCommitter:
    """Commits `write(cursor)` calls on the calling (loop) thread when that needs no waiting.

    `commit(write)` returns a future of `write`'s result: done at once for a lone save,
    else done once the iteration's group committed. An error of `write` (its group is
    rolled back and every other save of it committed alone, so only its caller sees
    it) or of the COMMIT (every save of the group fails, as on the worker) is set on
    the future; `HANDED_BACK` means the worker should run it. None from `commit`: the
    write lock is taken right now, the worker's job too.
    """

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
        self._saves = 0  # saves asked for in this loop iteration
        self._burst = False  # the last loop iteration with saves had more than one
        self._group: list[tuple[_Write, asyncio.Future[Any]]] = []
        self._closed = False
        self.commits = 0  # transactions committed here (tests count them)

    def commit(
        self, write: Callable[[sqlite3.Cursor], _R]
    ) -> asyncio.Future[_R | HandedBack] | None:
        """Commit `write` now (a lone save) or with this iteration's group (see the class)."""
        loop = asyncio.get_running_loop()
        self._saves += 1
        if self._saves == 1:
            loop.call_soon(self._next_iteration)
        elif self._saves == 2:
            self._burst = True
        future: asyncio.Future[_R | HandedBack] = loop.create_future()
        if self._saves > 1 or self._burst:
            if not self._group:
                loop.call_soon(self._commit_group)
            self._group.append((write, future))
            return future
        if not self._begin():
            return None
        self._run_alone(write, future)
        return future

    def close(self) -> None:
        """Close the connection (idempotent); saves still grouped go to the worker."""
        self._closed = True
        cursor, self._cursor = self._cursor, None
        if cursor is not None:
            cursor.connection.close()

    # -- the transactions ----------------------------------------------------------------------

    def _begin(self) -> bool:
        """Open a write transaction, or False when that would mean waiting (or closed)."""
        if self._closed:
            return False
        try:
            cursor = self._cursor or self._open()
            cursor.execute("BEGIN IMMEDIATE")
        except sqlite3.Error:  # locked by another writer (or unusable): the worker waits
            return False
        return True

    def _run_alone(self, write: _Write, future: asyncio.Future[Any]) -> None:
        """`write` in the transaction `_begin` opened, committed; its outcome on `future`."""
        cursor = self._cursor
        assert cursor is not None
        try:
            result = write(cursor)
            cursor.execute("COMMIT")
        except Exception as exc:
            self._rollback(cursor)
            _settle(future, exception=exc)
            return
        except BaseException:
            self._rollback(cursor)
            raise
        self.commits += 1
        self._on_commit()
        _settle(future, result)

    def _commit_group(self) -> None:
        """The saves joined in the last iteration, in one transaction."""
        group, self._group = self._group, []
        if not self._begin():
            for _, future in group:
                _settle(future, HANDED_BACK)
            return
        cursor = self._cursor
        assert cursor is not None
        try:
            results = [write(cursor) for write, _ in group]
        except Exception:  # one save refused: undo the group, then commit each alone
            self._rollback(cursor)
            self._each_alone(group)
            return
        except BaseException:
            self._rollback(cursor)
            raise
        try:
            cursor.execute("COMMIT")
        except sqlite3.Error as exc:
            self._rollback(cursor)
            for _, future in group:
                _settle(future, exception=exc)
            return
        self.commits += 1
        self._on_commit()
        for (_, future), result in zip(group, results, strict=True):
            _settle(future, result)

    def _each_alone(self, group: list[tuple[_Write, asyncio.Future[Any]]]) -> None:
        for write, future in group:
            if self._begin():
                self._run_alone(write, future)
            else:
                _settle(future, HANDED_BACK)

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

    def _rollback(self, cursor: sqlite3.Cursor) -> None:
        conn = cursor.connection
        try:
            if conn.in_transaction:  # SQLite rolls back some errors itself
                conn.execute("ROLLBACK")
        except sqlite3.Error:  # cannot even roll back: closing undoes it, the next save reopens
            self._cursor = None
            conn.close()

    def _next_iteration(self) -> None:
        self._burst = self._saves > 1
        self._saves = 0


def _settle(
    future: asyncio.Future[Any], result: object = None, exception: BaseException | None = None
) -> None:
    if future.done():  # its caller was cancelled: nobody reads the outcome
        return
    if exception is not None:
        future.set_exception(exception)
    else:
        future.set_result(result)
