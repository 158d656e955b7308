"""Inbox: the Slack events the conduit acknowledged and has not handed to the core yet.

Slack never sends an acknowledged event again, so an event is written here (and
committed, fsynced) before it is acknowledged, and removed once its work is done: sent to
the core (its publish acknowledged), or found to need nothing. A conduit that dies
(kill -9 included) or waits minutes for a core that is away loses nothing: at start it
does what its inbox still holds, in order, before taking new events. One SQLite file per
durable name in the conduit's `state_dir`; SQLite runs on a thread of its own so the
event loop never waits for a disk.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from ore_core import OreError

__all__ = ["Inbox", "InboxError"]

_T = TypeVar("_T")


class InboxError(OreError):
    """The inbox file cannot be opened or written (the event is then not acknowledged)."""


class Inbox:
    """See the module docstring. `await Inbox.open(path)`, then `put`, `done`, `close`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._db: sqlite3.Connection | None = None
        self._closed = False
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="slack-inbox")

    @classmethod
    async def open(cls, path: Path) -> Inbox:
        """Open (or create) the inbox at `path`; InboxError naming the file if it cannot."""
        inbox = cls(path)
        await inbox._run(inbox._open)
        return inbox

    def _open(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=FULL")  # an acknowledged event survives a power cut
            db.execute(
                "CREATE TABLE IF NOT EXISTS events (id INTEGER PRIMARY KEY, body TEXT NOT NULL)"
            )
        except (OSError, sqlite3.Error) as exc:
            raise InboxError(f"cannot open the Slack inbox {self.path}: {exc}") from exc
        self._db = db

    async def pending(self) -> list[tuple[int, dict[str, Any]]]:
        """What an earlier run left undone, oldest first: (entry, event body)."""
        rows = await self._run(self._select)
        found = []
        for entry, body in rows:
            try:
                value = json.loads(body)
            except ValueError:
                value = None
            if isinstance(value, dict):
                found.append((entry, value))
            else:  # not written by this module: nothing can be done with it
                await self.done(entry)
        return found

    def _select(self) -> list[tuple[int, str]]:
        return list(self._connection().execute("SELECT id, body FROM events ORDER BY id"))

    async def put(self, body: Mapping[str, Any]) -> int:
        """Keep `body` (committed when this returns); its entry, for `done`."""
        text = json.dumps(body, separators=(",", ":"))
        return await self._run(self._insert, text)

    def _insert(self, text: str) -> int:
        try:
            cursor = self._connection().execute("INSERT INTO events (body) VALUES (?)", (text,))
        except sqlite3.Error as exc:
            raise InboxError(f"cannot write to the Slack inbox {self.path}: {exc}") from exc
        return int(cursor.lastrowid or 0)

    async def done(self, entry: int) -> None:
        """The entry's work is over: forget it."""
        await self._run(self._delete, entry)

    def _delete(self, entry: int) -> None:
        try:
            self._connection().execute("DELETE FROM events WHERE id = ?", (entry,))
        except sqlite3.Error as exc:  # done again after a restart: the core drops repeats
            raise InboxError(f"cannot update the Slack inbox {self.path}: {exc}") from exc

    async def count(self) -> int:
        """Entries still held."""
        return await self._run(self._count)

    def _count(self) -> int:
        return int(self._connection().execute("SELECT count(*) FROM events").fetchone()[0])

    async def close(self) -> None:
        """Close the file (idempotent)."""
        if self._closed:
            return
        db, self._db = self._db, None
        if db is not None:
            await self._run(db.close)
        self._closed = True
        self._thread.shutdown(wait=False)

    def _connection(self) -> sqlite3.Connection:
        if self._db is None:
            raise InboxError(f"the Slack inbox {self.path} is closed")
        return self._db

    async def _run(self, work: Callable[..., _T], *args: Any) -> _T:
        if self._closed:
            raise InboxError(f"the Slack inbox {self.path} is closed")
        return await asyncio.get_running_loop().run_in_executor(self._thread, work, *args)
