"""SQLiteStore: threads in one SQLite database (stdlib `sqlite3`), safe for several processes.

Schema (version 3, kept in `PRAGMA user_version`):
`threads(id, current_tip, created_at, updated_at, version)` (times as RFC 3339 text;
`version` counts saves and makes every save a compare-and-set),
`turns(seq, thread_id, turn_id, json)` (the Go turn JSON; `seq` is the rowid, so a
thread's turns come back in the order first stored and a new turn needs no lookup of
its number), unique on `(thread_id, turn_id)`; `metadata(thread_id, key, value)`
indexed on `(key, value)` so `get_by` is an index lookup. To change the schema, append
a function to `MIGRATIONS`: the store runs the missing ones at open, in one transaction.

Every call runs on one dedicated worker thread that owns the connection, so the event
loop never waits on SQLite; the one exception are small saves while the worker is
idle: a `LoopCommitter` commits a loop iteration's saves together on the loop when
that needs no waiting and no fsync (no thread hops: at one conversation most of a
save's cost, at a hundred a third of the core's context switches). Saves queued for
the worker are committed together in one transaction (group commit), each caller
resuming only after that commit; a save that fails inside the group is retried
alone, so only its caller sees the error. WAL mode lets readers in other processes
proceed during a write; `busy_timeout` makes writers queue instead of failing. A
`WalCheckpointer` thread copies the WAL back into the database, so no save waits for a
checkpoint. `fsync` takes the journal's policy names: `always` (synchronous=FULL: a commit survives
power loss), `batch` (the default, NORMAL: a power loss may roll back the last
commits, an application crash loses nothing) and `never` (OFF).
"""

from __future__ import annotations

import asyncio
import builtins
import itertools
import os
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from ore_core import jsonutil
from ore_core.errors import LedgerError, StoreError, ThreadCorrupt
from ore_core.ids import generate_thread_id
from ore_core.ledger.file_repository import FsyncPolicy
from ore_core.ledger.thread import Thread
from ore_core.session.stores.base import BaseStore, directory_fault
from ore_core.session.stores.changes import ChangeSet, ChangeTracker
from ore_core.session.stores.loop_commit import LoopCommitter, Outcome
from ore_core.session.stores.thread_json import build_thread, ordered_turns
from ore_core.session.stores.wal_checkpointer import WalCheckpointer
from ore_core.session.stores.worker import Call, SerialWorker
from ore_core.turn import Turn, turn_from_dict, turn_json

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "SQLiteStore"]

_R = TypeVar("_R")


def _schema_v1(conn: sqlite3.Connection) -> None:
    conn.execute(
        "CREATE TABLE threads (id TEXT PRIMARY KEY, current_tip TEXT NOT NULL DEFAULT '',"
        " created_at TEXT NOT NULL, updated_at TEXT NOT NULL)"
    )
    conn.execute(
        "CREATE TABLE turns (thread_id TEXT NOT NULL, turn_id TEXT NOT NULL,"
        " json TEXT NOT NULL, seq INTEGER NOT NULL, PRIMARY KEY (thread_id, turn_id))"
    )
    conn.execute(
        "CREATE TABLE metadata (thread_id TEXT NOT NULL, key TEXT NOT NULL,"
        " value TEXT NOT NULL, PRIMARY KEY (thread_id, key))"
    )
    conn.execute("CREATE INDEX metadata_by_value ON metadata (key, value)")


def _schema_v2(conn: sqlite3.Connection) -> None:
    # v1 numbered turns per thread, so every new turn scanned its thread for max(seq).
    conn.execute(
        "CREATE TABLE turns_v2 (seq INTEGER PRIMARY KEY, thread_id TEXT NOT NULL,"
        " turn_id TEXT NOT NULL, json TEXT NOT NULL, UNIQUE (thread_id, turn_id))"
    )
    conn.execute(
        "INSERT INTO turns_v2 (thread_id, turn_id, json)"
        " SELECT thread_id, turn_id, json FROM turns ORDER BY thread_id, seq"
    )
    conn.execute("DROP TABLE turns")
    conn.execute("ALTER TABLE turns_v2 RENAME TO turns")


def _schema_v3(conn: sqlite3.Connection) -> None:
    # The version every save compares and bumps (compare-and-set across processes).
    conn.execute("ALTER TABLE threads ADD COLUMN version INTEGER NOT NULL DEFAULT 0")


MIGRATIONS: tuple[Callable[[sqlite3.Connection], None], ...] = (
    _schema_v1,
    _schema_v2,
    _schema_v3,
)
"""`MIGRATIONS[n]` takes the schema from version n to n + 1 (0 = empty database)."""

SCHEMA_VERSION = len(MIGRATIONS)

# In WAL mode: FULL syncs the WAL on every commit; NORMAL only at checkpoints (a power
# loss can roll back the last commits, an application crash cannot); OFF never.
_SYNCHRONOUS = {FsyncPolicy.ALWAYS: "FULL", FsyncPolicy.BATCH: "NORMAL", FsyncPolicy.NEVER: "OFF"}

# The time is taken by SQLite inside the statement: no formatting on the worker thread.
_NOW = "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')"
_INSERT_THREAD = (
    f"INSERT INTO threads (id, current_tip, created_at, updated_at) VALUES (?, ?, {_NOW}, {_NOW})"
)
_UPDATE_THREAD = (
    f"UPDATE threads SET updated_at = {_NOW}, current_tip = coalesce(?, current_tip),"
    " version = version + 1 WHERE id = ?"
)
_UPDATE_THREAD_IF = _UPDATE_THREAD + " AND version = ?"

# A save whose turns' JSON is larger than this always goes to the worker thread: its
# commit would hold the loop for longer than a thread hop costs.
LOOP_COMMIT_MAX_BYTES = 64 * 1024


class _GroupUndone(Exception):
    """A save in a group failed: roll the group's transaction back."""


@dataclass(frozen=True, slots=True)
class _Loaded:
    """A thread's rows, read in one transaction."""

    thread_id: str
    tip: str
    turns: list[Turn]  # in seq order
    metadata: dict[str, str]
    version: int


@dataclass(slots=True)
class _Rows:
    """What one save writes: the turns to upsert, the tip, the metadata changes.

    Not frozen (a frozen dataclass sets each field through `object.__setattr__`, one
    of these is made per save); nothing changes one after it is made."""

    turns: list[tuple[str, bytes]]  # (turn_id, json): the turn's one encoding, as bytes
    tip: str | None
    metadata: dict[str, str | None]
    expected: int | None = None  # the version the rows were loaded at (compare-and-set)
    full: bool = False  # replace everything stored for the thread


def _full_rows(thread: Thread) -> _Rows:
    turns = [(turn.id, turn_json(turn)) for turn in ordered_turns(thread.all_turns())]
    metadata: dict[str, str | None] = dict(thread.meta().all())
    return _Rows(turns, thread.current_tip, metadata, full=True)


class SQLiteStore(BaseStore):
    """Threads in a SQLite file; saves are incremental and transactional.

    Threads handed out carry a `ChangeRecorder`; `save` writes only the turns, tip and
    metadata keys changed since the thread was loaded or last saved, in one transaction.
    A Thread that did not come from this store is written in full. Copies from `get` are
    independent. Saves are compare-and-set on the thread's `version` column, checked
    and bumped in the save's transaction: saving a copy loaded before another save
    (from this process or another sharing the file) raises StaleThread and writes
    nothing, so two workers on one file never fork a thread.
    `get_or_create_by` runs in one `BEGIN IMMEDIATE` transaction: atomic across
    processes sharing the file.
    """

    name = "sqlite"

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        fsync: FsyncPolicy | str = FsyncPolicy.BATCH,
        busy_timeout: float = 10.0,
        read_only: bool = False,
    ) -> None:
        self.path = os.fspath(path)
        if os.path.isdir(self.path):  # SQLite would say only "unable to open database file"
            raise StoreError(
                f"store.path {self.path} is a directory: it names the SQLite database file "
                f"(e.g. {os.path.join(self.path, 'threads.db')})"
            )
        # Read-only (`ore threads list` and friends): the file is opened `mode=ro`, so
        # listing needs no write access; a save fails with the database's own error.
        self._read_only = read_only
        super().__init__(f"sqlite:{self.path}")
        try:
            self._synchronous = _SYNCHRONOUS[FsyncPolicy(fsync)]
        except ValueError:
            raise StoreError(
                f"unknown fsync policy {fsync!r} for {self.location}: "
                f"use one of {[str(p) for p in FsyncPolicy]}"
            )
        self._busy_timeout = busy_timeout
        self._worker = SerialWorker("ore-sqlite", group=self._commit_group)
        self._checkpointer = WalCheckpointer(
            self.path, synchronous=self._synchronous, busy_timeout=busy_timeout
        )
        self._conn: sqlite3.Connection | None = None
        # The saves' statements run on one cursor of the connection: `conn.execute`
        # would make (and free) a cursor per statement, several per save.
        self._cursor: sqlite3.Cursor | None = None
        self._tracker = ChangeTracker()
        # A commit that fsyncs (FULL) takes milliseconds: those always go to the worker.
        self._on_loop = (
            None
            if read_only or self._synchronous == "FULL"
            else LoopCommitter(
                self.path,
                synchronous=self._synchronous,
                autocheckpoint=WalCheckpointer.BACKSTOP_PAGES,
                on_commit=self._checkpointer.nudge,
            )
        )

    # -- Store ------------------------------------------------------------------------------

    async def create(
        self, thread_id: str | None = None, metadata: Mapping[str, str] | None = None
    ) -> Thread:
        """Insert a new empty thread; ThreadExists when the id is taken."""
        thread_id = generate_thread_id() if thread_id is None else thread_id
        metadata = dict(metadata or {})
        await self._run(self._insert_thread, self._checked_id(thread_id), metadata)
        return self._hand_out(_Loaded(thread_id, "", [], metadata, 0))

    async def get(self, thread_id: str) -> Thread:
        """The stored thread, read in one transaction."""
        loaded = await self._run(self._select_thread, self._checked_id(thread_id))
        if loaded is None:
            raise self._not_found(thread_id)
        return self._hand_out(loaded)

    async def get_by(self, key: str, value: str) -> Thread:
        """The lowest-id thread with metadata `key` == `value` (an index lookup)."""
        self._check_open()
        loaded = await self._run(self._select_by, key, value)
        if loaded is None:
            raise self._no_match(key, value)
        return self._hand_out(loaded)

    async def get_or_create_by(
        self, key: str, value: str, metadata: Mapping[str, str] | None = None
    ) -> tuple[Thread, bool]:
        """Find or create in one write transaction: atomic across processes."""
        self._check_open()
        wanted = {**(metadata or {}), key: value}
        loaded, created = await self._run(self._select_or_insert, key, value, wanted)
        return self._hand_out(loaded), created

    async def save(self, thread: Thread) -> None:
        """Write the changes since load or last save (everything for a foreign Thread).

        Returns once they are committed; with no changes it touches nothing. Raises
        StaleThread (nothing written) when the stored thread changed since this copy
        was loaded. A failed save puts its changes back for the next one.
        """
        thread_id = self._checked_id(thread.id)
        recorder = self._tracker.recorder(thread)
        if recorder is None:
            await self._run(self._write, thread_id, _full_rows(thread), grouped=True)
            return
        changes = recorder.take()
        if not changes:
            return
        try:
            net = ChangeSet.of(changes)
            turns = [(turn.id, turn_json(turn)) for turn in net.changed_turns(thread)]
            expected = recorder.version
            rows = _Rows(turns, net.tip, net.meta, expected if isinstance(expected, int) else None)
            on_loop = self._commit_on_loop(thread_id, rows)
            done, version = (False, None) if on_loop is None else await on_loop
            if not done:  # the worker directly: `_run`'s own coroutine costs a frame per save
                version = await self._worker.run(self._write, thread_id, rows, grouped=True)
            if version is None:
                # Deleted meanwhile: the changes alone would leave a fragment of the thread.
                version = await self._run(self._write, thread_id, _full_rows(thread), grouped=True)
        except BaseException as exc:
            recorder.restore(changes)
            if isinstance(exc, sqlite3.Error):
                raise self._failed(exc) from exc
            raise
        recorder.version = version

    async def delete(self, thread_id: str) -> bool:
        """Delete the thread and its rows; True when it existed."""
        return await self._run(self._delete_thread, self._checked_id(thread_id))

    async def list_ids(self, *, after: str = "", limit: int | None = None) -> builtins.list[str]:
        """Ids in ascending order after `after` (an index range scan)."""
        self._check_open()
        return await self._run(self._select_ids, after, -1 if limit is None else max(limit, 0))

    async def close(self) -> None:
        """Close the connection and stop the worker thread. Idempotent."""
        if self._closed:
            return
        await super().close()
        if self._on_loop is not None:
            self._on_loop.close()
        try:
            await asyncio.to_thread(self._checkpointer.close)
        finally:
            await self._worker.close(self._disconnect)

    def _failed(self, cause: Exception) -> StoreError:
        """The error for a database failure; a damaged file says which and what to do."""
        if getattr(cause, "sqlite_errorname", "") in _DAMAGED:
            return StoreError(
                f"{self.location}: {cause}: the file is damaged or is not an ore SQLite "
                f"store; stop ore and move {self.path} aside (ore then starts an empty "
                "store there) or restore it from a backup, or set store.path to another file"
            )
        if getattr(cause, "sqlite_errorname", "") in _NO_WRITE and not self._read_only:
            fault = directory_fault(os.path.dirname(os.path.abspath(self.path)))
            if fault is not None:
                return StoreError(f"{self.location}: cannot write: {fault} ({cause})")
        return super()._failed(cause)

    async def check(self) -> None:
        """StoreError unless the database takes a write now: a committed one.

        A rolled-back insert touches only SQLite's page cache and passes on a full or
        read-only disk; rewriting the header's `user_version` (its value unchanged)
        commits one page to the WAL through the same file a save writes, as durably."""
        self._check_open()
        await self._run(self._probe_write)

    async def _thread_ids(self) -> builtins.list[str]:
        return await self._run(self._select_ids, "", -1)

    # -- on the loop ---------------------------------------------------------------------------

    async def _run(self, func: Callable[..., _R], *args: object, grouped: bool = False) -> _R:
        try:
            return await self._worker.run(func, *args, grouped=grouped)
        except sqlite3.Error as exc:
            raise self._failed(exc) from exc

    def _commit_on_loop(
        self, thread_id: str, rows: _Rows
    ) -> asyncio.Future[Outcome[int | None]] | None:
        """The outcome of committing `rows` with this loop iteration's other saves, on
        the loop (see `LoopCommitter`); None when the worker must take them."""
        on_loop = self._on_loop
        if on_loop is None or self._conn is None or not self._worker.idle:
            # (no connection yet: the worker has not opened and migrated the file)
            return None
        size = sum(len(raw) for _, raw in rows.turns)
        if size > LOOP_COMMIT_MAX_BYTES:
            return None
        return on_loop.add(partial(self._write, thread_id, rows), size)

    def _hand_out(self, loaded: _Loaded) -> Thread:
        """The caller's Thread, tracked so that `save` writes only what changes."""
        thread = build_thread(loaded.thread_id, loaded.turns, loaded.tip, loaded.metadata)
        return self._tracker.track(thread, loaded.version)

    # -- on the worker thread ----------------------------------------------------------------------

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None and self._read_only:
            self._conn = self._read_only_connection()
        if self._conn is None:
            os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
            conn = sqlite3.connect(
                self.path, timeout=self._busy_timeout, isolation_level=None, check_same_thread=True
            )
            try:
                conn.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout * 1000)}")
                conn.execute(f"PRAGMA synchronous = {self._synchronous}")
                conn.execute(f"PRAGMA wal_autocheckpoint = {WalCheckpointer.BACKSTOP_PAGES}")
                _enable_wal(conn, time.monotonic() + self._busy_timeout)
                _migrate(conn, self.location)
            except BaseException:
                conn.close()
                raise
            self._conn = conn
        return self._conn

    def _read_only_connection(self) -> sqlite3.Connection:
        """`mode=ro`; where even the WAL index cannot be created (a read-only directory)
        the file is read as it is (`immutable`): no writer can be adding to it there."""
        uri = f"{Path(self.path).absolute().as_uri()}?mode=ro"
        for options in ("", "&immutable=1"):
            conn = sqlite3.connect(
                uri + options, uri=True, timeout=self._busy_timeout, isolation_level=None
            )
            try:
                conn.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout * 1000)}")
                conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
            except sqlite3.OperationalError:
                conn.close()
                if options:
                    raise
                continue
            return conn
        raise AssertionError("unreachable")

    def _write_cursor(self) -> sqlite3.Cursor:
        """The cursor saves write with (used only by them: no result set spans a call)."""
        if self._cursor is None:
            self._cursor = self._connection().cursor()
        return self._cursor

    def _disconnect(self) -> None:
        self._cursor = None
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _commit_group(self, calls: Sequence[Call[Any]]) -> None:
        """Run queued saves in one transaction: one commit (one WAL write) for all of them.

        When one save fails, the group is rolled back and every save retried in a
        transaction of its own, so only the failing save's caller sees an error. When
        BEGIN or COMMIT fails, the worker fails every save of the group (each caller
        keeps its changes for its next save).
        """
        conn = self._connection()  # the transaction by hand: this runs once per commit
        cursor = self._write_cursor()
        cursor.execute("BEGIN IMMEDIATE")
        try:
            for call in calls:
                if call.run() is not None:
                    raise _GroupUndone
            cursor.execute("COMMIT")
        except BaseException as exc:  # a failed COMMIT too: never leave the transaction open
            _rollback(conn)
            if not isinstance(exc, _GroupUndone):
                raise
            self._retry_alone(calls)
            return
        self._checkpointer.nudge()

    def _retry_alone(self, calls: Sequence[Call[Any]]) -> None:
        """One save of the group failed: run each in a transaction of its own."""
        if len(calls) == 1:
            return  # the call keeps its own error
        for call in calls:
            try:
                self._commit_group([call])
            except Exception as exc:  # BEGIN or COMMIT of this save alone
                call.fail(exc)

    @contextmanager
    def _transaction(self, mode: str = "DEFERRED") -> Iterator[sqlite3.Connection]:
        conn = self._connection()
        conn.execute(f"BEGIN {mode}")
        try:
            yield conn
            conn.execute("COMMIT")
        except BaseException:  # a failed COMMIT too: never leave the transaction open
            _rollback(conn)
            raise
        if mode == "IMMEDIATE":
            self._checkpointer.nudge()

    def _insert_thread(self, thread_id: str, metadata: Mapping[str, str]) -> None:
        with self._transaction("IMMEDIATE") as conn:
            self._insert(conn, thread_id, metadata)

    def _insert(
        self, conn: sqlite3.Connection, thread_id: str, metadata: Mapping[str, str]
    ) -> None:
        try:
            conn.execute(_INSERT_THREAD, (thread_id, ""))
        except sqlite3.IntegrityError:
            raise self._exists(thread_id) from None
        conn.executemany(
            "INSERT INTO metadata (thread_id, key, value) VALUES (?, ?, ?)",
            [(thread_id, key, value) for key, value in metadata.items()],
        )

    def _select_thread(self, thread_id: str) -> _Loaded | None:
        with self._transaction() as conn:
            return self._load(conn, thread_id)

    def _select_by(self, key: str, value: str) -> _Loaded | None:
        with self._transaction() as conn:
            thread_id = _match(conn, key, value)
            return None if thread_id is None else self._load(conn, thread_id)

    def _select_or_insert(
        self, key: str, value: str, metadata: Mapping[str, str]
    ) -> tuple[_Loaded, bool]:
        with self._transaction("IMMEDIATE") as conn:
            thread_id = _match(conn, key, value)
            loaded = None if thread_id is None else self._load(conn, thread_id)
            if loaded is not None:
                return loaded, False
            thread_id = generate_thread_id()
            self._insert(conn, thread_id, metadata)
            return _Loaded(thread_id, "", [], dict(metadata), 0), True

    def _write(
        self, thread_id: str, rows: _Rows, cursor: sqlite3.Cursor | None = None
    ) -> int | None:
        """Apply `rows` inside the group's transaction (or `cursor`'s) and return the
        thread's new version; None (nothing written) when partial rows meet a thread that
        is no longer stored; StaleThread when the stored version is not `rows.expected`."""
        if cursor is None:
            cursor = self._write_cursor()
        if rows.expected is None:
            updated = cursor.execute(_UPDATE_THREAD, (rows.tip, thread_id)).rowcount
        else:
            updated = cursor.execute(
                _UPDATE_THREAD_IF, (rows.tip, thread_id, rows.expected)
            ).rowcount
        if not updated:
            exists = cursor.execute("SELECT 1 FROM threads WHERE id = ?", (thread_id,)).fetchone()
            if exists is not None:
                raise self._stale(thread_id)
            if not rows.full:
                return None
            cursor.execute(_INSERT_THREAD, (thread_id, rows.tip or ""))
        if rows.full:
            cursor.execute("DELETE FROM turns WHERE thread_id = ?", (thread_id,))
            cursor.execute("DELETE FROM metadata WHERE thread_id = ?", (thread_id,))
        _upsert_turns(cursor, thread_id, rows.turns)
        if rows.metadata:
            _apply_metadata(cursor, thread_id, rows.metadata.items())
        if updated and rows.expected is not None:
            return rows.expected + 1  # the compare-and-set bumped it by one
        (version,) = cursor.execute(
            "SELECT version FROM threads WHERE id = ?", (thread_id,)
        ).fetchone()
        return int(version)

    def _load(self, conn: sqlite3.Connection, thread_id: str) -> _Loaded | None:
        row = conn.execute(
            "SELECT current_tip, version FROM threads WHERE id = ?", (thread_id,)
        ).fetchone()
        if row is None:
            return None
        rows = conn.execute(
            "SELECT turn_id, json FROM turns WHERE thread_id = ? ORDER BY seq", (thread_id,)
        )
        turns: list[Turn] = []
        for turn_id, raw in rows:
            try:
                turns.append(turn_from_dict(jsonutil.loads(raw)))
            except (LedgerError, ValueError) as exc:
                raise ThreadCorrupt(
                    f"thread {thread_id} in {self.location} is unreadable: turn {turn_id}: "
                    f"{exc} (repair the row or delete the thread)"
                ) from exc
        metadata = conn.execute("SELECT key, value FROM metadata WHERE thread_id = ?", (thread_id,))
        return _Loaded(thread_id, row[0], turns, dict(metadata.fetchall()), int(row[1]))

    def _probe_write(self) -> None:
        with self._transaction("IMMEDIATE") as conn:
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def _delete_thread(self, thread_id: str) -> bool:
        with self._transaction("IMMEDIATE") as conn:
            deleted = conn.execute("DELETE FROM threads WHERE id = ?", (thread_id,)).rowcount
            conn.execute("DELETE FROM turns WHERE thread_id = ?", (thread_id,))
            conn.execute("DELETE FROM metadata WHERE thread_id = ?", (thread_id,))
            return deleted > 0

    def _select_ids(self, after: str, limit: int) -> builtins.list[str]:
        rows = self._connection().execute(
            "SELECT id FROM threads WHERE id > ? ORDER BY id LIMIT ?", (after, limit)
        )
        return [thread_id for (thread_id,) in rows]


_DAMAGED = frozenset({"SQLITE_CORRUPT", "SQLITE_NOTADB"})
"""SQLite's names for a file that is not (or no longer) a readable database."""

_NO_WRITE = frozenset(
    {"SQLITE_CANTOPEN", "SQLITE_FULL", "SQLITE_READONLY", "SQLITE_IOERR"}
    | {f"SQLITE_READONLY_{kind}" for kind in ("DBMOVED", "DIRECTORY", "RECOVERY", "ROLLBACK")}
    | {f"SQLITE_IOERR_{kind}" for kind in ("WRITE", "FSYNC", "TRUNCATE", "SHMOPEN", "SHMSIZE")}
)
"""SQLite's names for a write that failed: its directory may be read-only or full."""


def _enable_wal(conn: sqlite3.Connection, deadline: float) -> None:
    """Switch the file to WAL (persistent, so only its first opener really does it).

    The switch needs an exclusive lock and SQLite reports a busy file at once instead
    of calling the busy handler, so connections racing to create the file retry here.
    """
    delay = 0.001
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            busy = getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_BUSY
            if not busy or time.monotonic() + delay > deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


def _migrate(conn: sqlite3.Connection, location: str) -> None:
    """Bring the schema to SCHEMA_VERSION; refuse a database from a newer ore."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        (version,) = conn.execute("PRAGMA user_version").fetchone()
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"{location} has schema version {version} but this ore knows only "
                f"{SCHEMA_VERSION}: upgrade ore to open it"
            )
        for step in MIGRATIONS[version:]:
            step(conn)
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        _rollback(conn)
        raise


def _rollback(conn: sqlite3.Connection) -> None:
    """Roll back unless SQLite already did (it does on some errors, e.g. a full disk)."""
    if conn.in_transaction:
        conn.execute("ROLLBACK")


def _match(conn: sqlite3.Connection, key: str, value: str) -> str | None:
    row = conn.execute(
        "SELECT thread_id FROM metadata WHERE key = ? AND value = ? ORDER BY thread_id LIMIT 1",
        (key, value),
    ).fetchone()
    return None if row is None else str(row[0])


def _upsert_sql(rows: int) -> str:
    # `?1` is the thread id, shared by the rows. The JSON comes as bytes (as encoded, no
    # decoding) and is stored as TEXT, as ever: CAST only relabels UTF-8 bytes as text.
    values = ", ".join(f"(?1, ?{2 * n}, CAST(?{2 * n + 1} AS TEXT))" for n in range(1, rows + 1))
    return (
        f"INSERT INTO turns (thread_id, turn_id, json) VALUES {values}"
        " ON CONFLICT (thread_id, turn_id) DO UPDATE SET json = excluded.json"
    )


# A save's few turns go in one statement (one step, one release of the GIL, instead of
# one per turn with executemany); more than this many go row by row.
_UPSERT_ROWS_MAX = 8
_UPSERTS = {rows: _upsert_sql(rows) for rows in range(1, _UPSERT_ROWS_MAX + 1)}
_flatten = itertools.chain.from_iterable


def _upsert_turns(
    conn: sqlite3.Connection | sqlite3.Cursor, thread_id: str, turns: Sequence[tuple[str, bytes]]
) -> None:
    # A new turn gets the next rowid as its seq (rows are inserted in order); a replaced
    # one keeps its place.
    sql = _UPSERTS.get(len(turns))
    if sql is not None:
        conn.execute(sql, (thread_id, *_flatten(turns)))
    elif turns:
        conn.executemany(_UPSERTS[1], [(thread_id, *turn) for turn in turns])


def _apply_metadata(
    conn: sqlite3.Connection | sqlite3.Cursor,
    thread_id: str,
    changes: Iterable[tuple[str, str | None]],
) -> None:
    for key, value in changes:
        if value is None:
            conn.execute("DELETE FROM metadata WHERE thread_id = ? AND key = ?", (thread_id, key))
        else:
            conn.execute(
                "INSERT INTO metadata (thread_id, key, value) VALUES (?, ?, ?)"
                " ON CONFLICT (thread_id, key) DO UPDATE SET value = excluded.value",
                (thread_id, key, value),
            )
