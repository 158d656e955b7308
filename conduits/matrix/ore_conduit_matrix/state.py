"""State: what the conduit keeps across restarts, in one SQLite file.

- the session a password login made (user, device, access token): a login makes a new
  device, and a transaction id is only recognised under the token it was sent with, so
  a restarted conduit must send with the same token for a repeated send to be one;
- the sync token (`next_batch`) up to which the core stored every event;
- the conversation of each message seen or sent, so an edit or a redaction (which
  names only its target) finds its thread;
- the encrypted rooms already told that the bot cannot read them;
- the text each post's transaction id's event shows: a post repeated after a crash
  names the event made then, which shows the text of then until the repeat's edit is
  made (so the new text is kept only after that edit: a kill between the repeat and
  its edit leaves the old one, and the next repeat edits again).
- the edits of each message made so far, and the last one's text: an edit's
  transaction id counts them, so an edit back to a text shown before (A, B, A) is a
  new event (the id of the first would name that old edit, and the message would keep
  B), while the same edit asked again (a retry, a repair after a restart) names the
  last one and stays one event.
- reactions: each user's (its target and key, since its redaction names only the
  reaction and strips it) and the bot's own (what to redact when it is taken back, and
  how many it took back there, so a reaction made again is a new transaction).

Each write is one short statement committed at once (WAL: it survives the process
being killed), done on the event loop: they are microseconds, a few per sync.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from ore_core import OreError

__all__ = ["Session", "State", "StateError"]

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS session (id INTEGER PRIMARY KEY CHECK (id = 1),"
    " user_id TEXT NOT NULL, device_id TEXT NOT NULL, access_token TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS cursor (id INTEGER PRIMARY KEY CHECK (id = 1), token TEXT)",
    "CREATE TABLE IF NOT EXISTS events (event_id TEXT PRIMARY KEY, conversation TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS told (room TEXT PRIMARY KEY)",
    "CREATE TABLE IF NOT EXISTS sends (txn TEXT PRIMARY KEY, text TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS edits (target TEXT PRIMARY KEY, made INTEGER NOT NULL,"
    " text TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS reactions (event_id TEXT PRIMARY KEY, target TEXT NOT NULL,"
    " key TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS own_reactions (target TEXT NOT NULL, key TEXT NOT NULL,"
    " event_id TEXT NOT NULL, taken_back INTEGER NOT NULL, PRIMARY KEY (target, key))",
)

Session = tuple[str, str, str]
"""(user id, device id, access token)."""


class StateError(OreError):
    """The state file cannot be opened or written."""


class State:
    """See the module docstring. `State.open(path)`, then its methods, `close()`."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    @classmethod
    def open(cls, path: Path) -> State:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(path, isolation_level=None)
            db.execute("PRAGMA journal_mode=WAL")
            for statement in _SCHEMA:
                db.execute(statement)
        except (OSError, sqlite3.Error) as exc:
            raise StateError(f"cannot open the Matrix conduit's state {path}: {exc}") from exc
        path.chmod(0o600)  # it holds the access token
        return cls(db)

    def close(self) -> None:
        self._db.close()

    def session(self) -> Session | None:
        row = self._db.execute("SELECT user_id, device_id, access_token FROM session").fetchone()
        return (str(row[0]), str(row[1]), str(row[2])) if row else None

    def keep_session(self, session: Session | None) -> None:
        self._db.execute("DELETE FROM session")
        if session is not None:
            self._db.execute("INSERT INTO session VALUES (1, ?, ?, ?)", session)

    def sync_token(self) -> str:
        row = self._db.execute("SELECT token FROM cursor").fetchone()
        return str(row[0]) if row and row[0] else ""

    def keep_sync_token(self, token: str) -> None:
        self._db.execute("INSERT OR REPLACE INTO cursor VALUES (1, ?)", (token,))

    def conversation_of(self, event_id: str) -> str | None:
        row = self._db.execute(
            "SELECT conversation FROM events WHERE event_id = ?", (event_id,)
        ).fetchone()
        return str(row[0]) if row else None

    def note(self, event_id: str, conversation: str) -> None:
        self._db.execute("INSERT OR IGNORE INTO events VALUES (?, ?)", (event_id, conversation))

    def note_reaction(self, event_id: str, target: str, key: str) -> None:
        self._db.execute(
            "INSERT OR IGNORE INTO reactions VALUES (?, ?, ?)", (event_id, target, key)
        )

    def reaction(self, event_id: str) -> tuple[str, str] | None:
        """(target, key) of a user's reaction seen before."""
        row = self._db.execute(
            "SELECT target, key FROM reactions WHERE event_id = ?", (event_id,)
        ).fetchone()
        return (str(row[0]), str(row[1])) if row else None

    def own_reaction(self, target: str, key: str) -> tuple[str, int]:
        """(the bot's reaction event on `target` with `key`, "" when none now; how many
        times it was taken back)."""
        row = self._db.execute(
            "SELECT event_id, taken_back FROM own_reactions WHERE target = ? AND key = ?",
            (target, key),
        ).fetchone()
        return (str(row[0]), int(row[1])) if row else ("", 0)

    def keep_own_reaction(self, target: str, key: str, event_id: str, taken_back: int) -> None:
        self._db.execute(
            "INSERT OR REPLACE INTO own_reactions VALUES (?, ?, ?, ?)",
            (target, key, event_id, taken_back),
        )

    def was_told(self, room: str) -> bool:
        return self._db.execute("SELECT 1 FROM told WHERE room = ?", (room,)).fetchone() is not None

    def keep_told(self, room: str) -> None:
        self._db.execute("INSERT OR IGNORE INTO told VALUES (?)", (room,))

    def sending(self, txn: str, text: str) -> str | None:
        """The text kept for `txn`'s event; None for its first send, whose `text` is
        kept now (before the send: a kill after it leaves the event with that text)."""
        row = self._db.execute("SELECT text FROM sends WHERE txn = ?", (txn,)).fetchone()
        if row is None:
            self._db.execute("INSERT INTO sends VALUES (?, ?)", (txn, text))
        return str(row[0]) if row else None

    def keep_shown(self, txn: str, text: str) -> None:
        """`txn`'s event shows `text` now (its repeat's edit was made)."""
        self._db.execute("INSERT OR REPLACE INTO sends VALUES (?, ?)", (txn, text))

    def edits(self, target: str) -> tuple[int, str]:
        """How many edits of message `target` were made (answered), and the last one's text."""
        row = self._db.execute(
            "SELECT made, text FROM edits WHERE target = ?", (target,)
        ).fetchone()
        return (int(row[0]), str(row[1])) if row else (0, "")

    def keep_edit(self, target: str, made: int, text: str) -> None:
        self._db.execute("INSERT OR REPLACE INTO edits VALUES (?, ?, ?)", (target, made, text))
