"""WalCheckpointer: copies an SQLite WAL back into its database from a thread of its own.

A checkpoint writes pages back into the database and, unless synchronous=OFF, fsyncs
twice: milliseconds that SQLite's automatic checkpoint charges to whichever commit
crosses its threshold, i.e. to some unlucky save. Run here instead, on a connection
of its own, a PASSIVE checkpoint (it never blocks readers or writers) overlaps with
the saves. The writer keeps a raised automatic threshold as a backstop, so the WAL
stays bounded when this thread cannot keep up.
"""

from __future__ import annotations

import sqlite3
import threading

import structlog

__all__ = ["WalCheckpointer"]

log = structlog.get_logger("ore.session")


class WalCheckpointer:
    """Checkpoints the database at `path` at most every `interval` seconds after a commit.

    `nudge` (any thread, cheap) says a commit happened; the thread starts with the
    first nudge. A failed checkpoint is logged and retried after the next commit: it
    only leaves the WAL longer, never loses data. `BACKSTOP_PAGES` is the automatic
    threshold the writer's connection should keep.
    """

    BACKSTOP_PAGES = 4000  # 4x SQLite's default: ~16 MB of WAL with 4 KiB pages

    def __init__(
        self, path: str, *, synchronous: str, busy_timeout: float, interval: float = 0.05
    ) -> None:
        self.path = path
        self._synchronous = synchronous
        self._busy_timeout = busy_timeout
        self._interval = interval
        self._wake = threading.Condition()
        self._dirty = False  # committed since the last checkpoint started
        self._stopping = False
        self._thread: threading.Thread | None = None

    def nudge(self) -> None:
        """Note a commit: a checkpoint follows within `interval`."""
        if self._dirty:  # read without the lock: a commit in flight is caught next round
            return
        with self._wake:
            if self._stopping:
                return
            self._dirty = True
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._serve, name=f"ore-sqlite-checkpoint {self.path}", daemon=True
                )
                self._thread.start()
            self._wake.notify()

    def close(self) -> None:
        """Stop the thread (after the checkpoint in progress, if any). Idempotent; blocks."""
        with self._wake:
            self._stopping = True
            self._wake.notify()
            thread = self._thread
        if thread is not None:
            thread.join()

    def _serve(self) -> None:
        try:
            conn = sqlite3.connect(self.path, timeout=self._busy_timeout, isolation_level=None)
            # The checkpointing connection's level decides whether the copy is fsynced.
            conn.execute(f"PRAGMA synchronous = {self._synchronous}")
        except sqlite3.Error as exc:
            log.warning("wal checkpointer cannot open the database", path=self.path, error=str(exc))
            return  # the writer's backstop threshold checkpoints instead
        try:
            while True:
                with self._wake:
                    self._wake.wait_for(lambda: self._dirty or self._stopping)
                    if self._stopping:
                        return
                    self._dirty = False
                try:
                    conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                except sqlite3.Error as exc:
                    log.warning("wal checkpoint failed", path=self.path, error=str(exc))
                with self._wake:
                    self._wake.wait_for(lambda: self._stopping, timeout=self._interval)
        finally:
            conn.close()
