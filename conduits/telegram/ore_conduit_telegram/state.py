"""State: what the conduit must remember across restarts, in one SQLite file.

- the current conversation of each chat (and topic): `/new` moves it;
- which conversation each message belongs to, so a reply continues its chain and an
  edit finds its thread;
- the Telegram message each answer replies to, the user turn it answers, and the
  answer each of the bot's messages belongs to (so `/retry` as a reply to an answer
  answers that answer's question again);
- the answer last rendered in each ore thread (its messages, whether it is finished, and
  the stored sequence up to which every answer of the thread was shown), so a restarted
  conduit finishes what it started and never shows an answer twice from ore's side;
- local replies (the greeting, "new conversation") waiting to be sent, so a crash
  neither loses nor repeats one.

Telegram keeps the update offset itself (confirmed by the next getUpdates), so it is
not here. Writes are committed before the call returns (in the WAL, which survives the
process being killed; a power cut may lose the last ones); SQLite runs on a thread of
its own so the event loop never waits for a disk. The one exception is the answer
record, written before and after every send: it is committed on the event loop over a
connection of its own (a WAL commit without fsync, microseconds), so the record of a
send never queues behind other chats' writes on that thread: the window in which
Telegram has a message the record does not name stays one commit wide.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from ore_core import OreError
from ore_core.conduit import AnswerRecord

__all__ = ["Note", "State", "StateError"]

_T = TypeVar("_T")
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS roots (chat INTEGER, topic INTEGER, root TEXT NOT NULL,"
    " PRIMARY KEY (chat, topic))",
    "CREATE TABLE IF NOT EXISTS chains (chat INTEGER, message INTEGER, root TEXT NOT NULL,"
    " PRIMARY KEY (chat, message))",
    "CREATE TABLE IF NOT EXISTS asked (trace TEXT PRIMARY KEY, message INTEGER NOT NULL)",
    "CREATE TABLE IF NOT EXISTS questions (trace TEXT PRIMARY KEY, turn TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS answered (chat INTEGER, message INTEGER, trace TEXT NOT NULL,"
    " PRIMARY KEY (chat, message))",
    "CREATE TABLE IF NOT EXISTS answers (thread TEXT PRIMARY KEY, record TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS notes (id TEXT PRIMARY KEY, chat INTEGER, topic INTEGER,"
    " reply_to INTEGER, text TEXT NOT NULL, sent INTEGER NOT NULL DEFAULT 0)",
)

_RECORD_BUSY_MS = 5000  # the other connection's writes are single short statements

Note = tuple[str, int, int, int, str]
"""A local reply: (id, chat, topic, message it replies to, text)."""


class StateError(OreError):
    """The state file cannot be opened or written."""


class State:
    """See the module docstring. `await State.open(path)`, then its methods, `close()`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._db: sqlite3.Connection | None = None
        self._records: sqlite3.Connection | None = None  # used on the event loop only
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="telegram-state")

    @classmethod
    async def open(cls, path: Path) -> State:
        """Open (or create) the state at `path`; StateError naming the file if it cannot."""
        state = cls(path)
        await state._run(state._open)
        return state

    def _open(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            db.execute("PRAGMA journal_mode=WAL")
            # A commit survives the process being killed (the OS has it) without waiting
            # for the disk: the window in which a sent message is not recorded yet (and
            # is sent again after a kill -9) stays a few microseconds, not an fsync.
            db.execute("PRAGMA synchronous=NORMAL")
            for statement in _SCHEMA:
                db.execute(statement)
            records = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            records.execute(f"PRAGMA busy_timeout = {_RECORD_BUSY_MS}")
            records.execute("PRAGMA synchronous=NORMAL")
        except (OSError, sqlite3.Error) as exc:
            raise StateError(f"cannot open the Telegram state {self.path}: {exc}") from exc
        self._db = db
        self._records = records

    async def close(self) -> None:
        """Close the file (idempotent)."""
        db, self._db = self._db, None
        records, self._records = self._records, None
        if records is not None:
            records.close()
        if db is not None:
            await self._run(db.close)
        self._thread.shutdown(wait=False)

    # -- conversations --------------------------------------------------------------

    async def root(self, chat: int, topic: int) -> str:
        """The current conversation root of a chat's topic ("0": its first)."""
        row = await self._one("SELECT root FROM roots WHERE chat=? AND topic=?", chat, topic)
        return str(row[0]) if row else "0"

    async def set_root(self, chat: int, topic: int, root: str) -> None:
        """Start a new conversation in a chat's topic (`/new`)."""
        await self._write(
            "INSERT OR REPLACE INTO roots (chat, topic, root) VALUES (?, ?, ?)", chat, topic, root
        )

    async def chain(self, chat: int, message: int) -> str | None:
        """The conversation root of a message the conduit has seen or sent."""
        row = await self._one("SELECT root FROM chains WHERE chat=? AND message=?", chat, message)
        return str(row[0]) if row else None

    async def add_to_chain(self, chat: int, message: int, root: str) -> None:
        """Remember that `message` belongs to the conversation `root`."""
        await self._write(
            "INSERT OR IGNORE INTO chains (chat, message, root) VALUES (?, ?, ?)",
            chat,
            message,
            root,
        )

    async def set_asked(self, trace: str, message: int, question: str) -> None:
        """The answer with `trace` replies to Telegram message `message` and answers the
        user turn `question` (its turn id or the event id it was sent with)."""

        def write() -> None:
            db = self._connection()
            try:
                with db:  # one transaction: both or neither
                    db.execute("BEGIN")
                    db.execute(
                        "INSERT OR REPLACE INTO asked (trace, message) VALUES (?, ?)",
                        (trace, message),
                    )
                    db.execute(
                        "INSERT OR REPLACE INTO questions (trace, turn) VALUES (?, ?)",
                        (trace, question),
                    )
            except sqlite3.Error as exc:
                raise StateError(f"cannot write the Telegram state {self.path}: {exc}") from exc

        await self._run(write)

    async def add_answered(self, chat: int, message: int, trace: str) -> None:
        """The bot's message `message` is (a part of) the answer with `trace`."""
        await self._write(
            "INSERT OR IGNORE INTO answered (chat, message, trace) VALUES (?, ?, ?)",
            chat,
            message,
            trace,
        )

    async def question_of(self, chat: int, message: int) -> str | None:
        """The user turn whose answer the bot's message `message` is (None: not known as
        an answer, e.g. a greeting or a relayed copy)."""
        row = await self._one(
            "SELECT q.turn FROM answered a JOIN questions q ON q.trace = a.trace"
            " WHERE a.chat=? AND a.message=?",
            chat,
            message,
        )
        return str(row[0]) if row else None

    async def asked(self, trace: str) -> int:
        """The Telegram message the answer with `trace` replies to (0: unknown)."""
        row = await self._one("SELECT message FROM asked WHERE trace=?", trace)
        return int(row[0]) if row else 0

    # -- answers --------------------------------------------------------------------

    async def record(self, thread: str) -> AnswerRecord:
        """The record of the answer last rendered in an ore thread (empty: none)."""
        row = await self._one("SELECT record FROM answers WHERE thread=?", thread)
        return AnswerRecord.loads(row[0] if row else None)

    def save_record(self, thread: str, record: AnswerRecord) -> None:
        """Keep the record of the answer being rendered in an ore thread, committed now
        on the event loop (see the module docstring: it queues behind nothing)."""
        if self._records is None:
            raise StateError(f"the Telegram state {self.path} is closed")
        try:
            self._records.execute(
                "INSERT OR REPLACE INTO answers (thread, record) VALUES (?, ?)",
                (thread, record.dumps()),
            )
        except sqlite3.Error as exc:
            raise StateError(f"cannot write the Telegram state {self.path}: {exc}") from exc

    # -- local replies --------------------------------------------------------------

    async def add_note(self, note: Note) -> None:
        """Queue a local reply (once per id: a repeated update adds nothing)."""
        await self._write(
            "INSERT OR IGNORE INTO notes (id, chat, topic, reply_to, text) VALUES (?, ?, ?, ?, ?)",
            *note,
        )

    async def notes(self) -> list[Note]:
        """Local replies not sent yet, oldest first."""
        rows = await self._run(
            lambda: list(
                self._connection().execute(
                    "SELECT id, chat, topic, reply_to, text FROM notes WHERE sent=0 ORDER BY rowid"
                )
            )
        )
        return [(str(r[0]), int(r[1]), int(r[2]), int(r[3]), str(r[4])) for r in rows]

    async def note_sent(self, note_id: str) -> None:
        """A local reply was sent."""
        await self._write("UPDATE notes SET sent=1 WHERE id=?", note_id)

    # -- plumbing -------------------------------------------------------------------

    def _connection(self) -> sqlite3.Connection:
        if self._db is None:
            raise StateError(f"the Telegram state {self.path} is closed")
        return self._db

    async def _one(self, sql: str, *args: Any) -> Any:
        return await self._run(lambda: self._connection().execute(sql, args).fetchone())

    async def _write(self, sql: str, *args: Any) -> None:
        def write() -> None:
            try:
                self._connection().execute(sql, args)
            except sqlite3.Error as exc:
                raise StateError(f"cannot write the Telegram state {self.path}: {exc}") from exc

        await self._run(write)

    async def _run(self, work: Callable[[], _T]) -> _T:
        return await asyncio.get_running_loop().run_in_executor(self._thread, work)
