"""WalCheckpointer: copies an SQLite WAL back into its database from a thread of its own.

A checkpoint writes pages back into the database and, unless synchronous=OFF, fsyncs
twice: milliseconds that SQLite's automatic checkpoint charges to whichever commit
crosses its threshold, i.e. to some unlucky save. Run here instead, on a connection
of its own, a PASSIVE checkpoint (it never blocks readers or writers) overlaps with
the saves. The writer keeps a raised automatic threshold as a backstop, so the WAL
stays bounded when this thread cannot keep up.

Every round wakes this thread and passes it the GIL: at most two rounds a second (the
WAL then holds half a second of commits, well under the backstop at hundreds of
turns a second) kept it from costing a fifth of a context switch per turn at 100
conversations, as one round every 50 ms did, and a page written by many commits is
copied once.
"""

from __future__ import annotations

import sqlite3

import structlog

from ore_core.ledger.doorbell import Doorbell

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
        self, path: str, *, synchronous: str, busy_timeout: float, interval: float = 0.5
    ) -> None:
        self.path = path
        self._synchronous = synchronous
        self._busy_timeout = busy_timeout
        self._interval = interval
        # Rung by each commit (`nudge`) since the last checkpoint started.
        self._doorbell = Doorbell(f"ore-sqlite-checkpoint {path}", self._serve)

    def nudge(self) -> None:
        """Note a commit: a checkpoint follows within `interval`."""
        if not self._doorbell.rung:  # a commit in flight is caught next round
            self._doorbell.ring()

    def close(self) -> None:
        """Stop the thread (after the checkpoint in progress, if any). Idempotent; blocks."""
        self._doorbell.stop()

    def _serve(self) -> None:
        try:
            conn = sqlite3.connect(self.path, timeout=self._busy_timeout, isolation_level=None)
            # The checkpointing connection's level decides whether the copy is fsynced.
            conn.execute(f"PRAGMA synchronous = {self._synchronous}")
        except sqlite3.Error as exc:
            log.warning("wal checkpointer cannot open the database", path=self.path, error=str(exc))
            return  # the writer's backstop threshold checkpoints instead
        try:
            while self._doorbell.wait():
                try:
                    conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                except sqlite3.Error as exc:
                    log.warning("wal checkpoint failed", path=self.path, error=str(exc))
                self._doorbell.rest(self._interval)
        finally:
            conn.close()
