"""SQLiteStore: WAL, schema versions, incremental saves, group commit, several processes."""

from __future__ import annotations

import asyncio
import shutil
import sqlite3
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import closing
from functools import partial
from pathlib import Path

import pytest

from ore_core import Role, StoreError, Text, Thread, ThreadCorrupt, ThreadNotFound, Turn, jsonutil
from ore_core.session.stores import SQLiteStore
from ore_core.session.stores.sqlite_store import (
    LOOP_COMMIT_MAX_BYTES,
    MIGRATIONS,
    SCHEMA_VERSION,
)
from ore_core.turn import turn_json, turn_to_dict
from tests.session.stores.worker_gate import queued_together

# Rows written by the store, recorded by triggers: seen from outside the store's connection.
AUDIT = """
CREATE TABLE audit (op TEXT, tbl TEXT, row TEXT);
CREATE TRIGGER turns_ins AFTER INSERT ON turns
  BEGIN INSERT INTO audit VALUES ('insert', 'turns', NEW.turn_id); END;
CREATE TRIGGER turns_upd AFTER UPDATE ON turns
  BEGIN INSERT INTO audit VALUES ('update', 'turns', NEW.turn_id); END;
CREATE TRIGGER turns_del AFTER DELETE ON turns
  BEGIN INSERT INTO audit VALUES ('delete', 'turns', OLD.turn_id); END;
CREATE TRIGGER meta_ins AFTER INSERT ON metadata
  BEGIN INSERT INTO audit VALUES ('insert', 'metadata', NEW.key); END;
CREATE TRIGGER meta_upd AFTER UPDATE ON metadata
  BEGIN INSERT INTO audit VALUES ('update', 'metadata', NEW.key); END;
CREATE TRIGGER meta_del AFTER DELETE ON metadata
  BEGIN INSERT INTO audit VALUES ('delete', 'metadata', OLD.key); END;
"""

GET_OR_CREATE_SCRIPT = """
import asyncio, sys
from ore_core.session.stores import SQLiteStore

async def main() -> None:
    store = SQLiteStore(sys.argv[1])
    found = await asyncio.gather(*(store.get_or_create_by("slack.thread", "t") for _ in range(10)))
    print(" ".join(sorted({thread.id for thread, _ in found})))
    await store.close()

asyncio.run(main())
"""


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "ore.db"


@pytest.fixture
async def store(db_path: Path) -> AsyncIterator[SQLiteStore]:
    store = SQLiteStore(db_path)
    yield store
    await store.close()


@pytest.fixture
def outside(db_path: Path) -> Iterator[sqlite3.Connection]:
    """A connection of our own to the store's file."""
    with closing(sqlite3.connect(db_path, isolation_level=None)) as conn:
        yield conn


def _audit(conn: sqlite3.Connection) -> list[tuple[str, str, str]]:
    rows = conn.execute("SELECT op, tbl, row FROM audit ORDER BY rowid").fetchall()
    conn.execute("DELETE FROM audit")
    return rows


def _texts(thread: Thread) -> list[str]:
    return [a.content for turn in thread.turns() for a in turn.artifacts if isinstance(a, Text)]


async def test_missing_thread_error_names_the_thread_and_the_database(
    store: SQLiteStore, db_path: Path
) -> None:
    with pytest.raises(ThreadNotFound) as caught:
        await store.get("3fa1")
    assert str(caught.value) == f"thread 3fa1 not found in sqlite:{db_path}"


async def test_database_is_in_wal_mode(store: SQLiteStore, outside: sqlite3.Connection) -> None:
    await store.create()
    assert outside.execute("PRAGMA journal_mode").fetchone() == ("wal",)


@pytest.mark.parametrize(("fsync", "synchronous"), [("always", 2), ("batch", 1), ("never", 0)])
async def test_fsync_policy_sets_the_synchronous_level(
    db_path: Path, fsync: str, synchronous: int
) -> None:
    store = SQLiteStore(db_path, fsync=fsync)
    try:
        # A per-connection setting: only the store's own connection can report it.
        def read_level() -> object:
            return store._connection().execute("PRAGMA synchronous").fetchone()

        assert await store._run(read_level) == (synchronous,)
    finally:
        await store.close()


def test_unknown_fsync_policy_is_refused(db_path: Path) -> None:
    with pytest.raises(StoreError, match="sometimes"):
        SQLiteStore(db_path, fsync="sometimes")


async def test_schema_version_is_recorded(store: SQLiteStore, outside: sqlite3.Connection) -> None:
    await store.create()
    assert outside.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)


async def test_database_from_a_newer_ore_is_refused(
    db_path: Path, outside: sqlite3.Connection
) -> None:
    outside.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    store = SQLiteStore(db_path)
    with pytest.raises(StoreError, match="upgrade ore"):
        await store.list_ids()
    await store.close()


async def test_get_by_uses_the_metadata_index(
    store: SQLiteStore, outside: sqlite3.Connection
) -> None:
    await store.create()
    plan = outside.execute(
        "EXPLAIN QUERY PLAN SELECT thread_id FROM metadata WHERE key = ? AND value = ?",
        ("k", "v"),
    ).fetchall()
    assert "metadata_by_value" in str(plan)


async def test_saving_one_new_turn_writes_only_its_row(
    store: SQLiteStore, outside: sqlite3.Connection
) -> None:
    thread = await store.create(metadata={"a": "1"})
    for n in range(3):
        thread.append(Role.USER, Text(f"old {n}"))
    await store.save(thread)
    outside.executescript(AUDIT)
    new = thread.append(Role.USER, Text("new"))
    await store.save(thread)
    assert _audit(outside) == [("insert", "turns", new.id)]


async def test_saving_a_metadata_change_writes_only_that_key(
    store: SQLiteStore, outside: sqlite3.Connection
) -> None:
    thread = await store.create(metadata={"a": "1", "b": "2", "c": "3"})
    thread.append(Role.USER, Text("turn"))
    await store.save(thread)
    outside.executescript(AUDIT)
    thread.meta().set("b", "changed")
    thread.meta().delete("c")
    await store.save(thread)
    assert _audit(outside) == [("update", "metadata", "b"), ("delete", "metadata", "c")]


async def test_saving_without_changes_writes_no_turn_or_metadata_row(
    store: SQLiteStore, outside: sqlite3.Connection
) -> None:
    thread = await store.create(metadata={"a": "1"})
    thread.append(Role.USER, Text("turn"))
    await store.save(thread)
    outside.executescript(AUDIT)
    await store.save(thread)
    assert _audit(outside) == []


async def test_thread_not_from_this_store_is_written_in_full(
    store: SQLiteStore, db_path: Path
) -> None:
    stored = await store.create("t", metadata={"a": "1", "b": "2"})
    stored.append(Role.USER, Text("stored"))
    await store.save(stored)
    outsider = Thread("t", metadata={"a": "1"})
    outsider.append(Role.USER, Text("replacement"))
    await store.save(outsider)
    loaded = await store.get("t")
    assert (_texts(loaded), len(loaded), loaded.meta().all()) == (["replacement"], 1, {"a": "1"})


async def test_failed_save_keeps_its_changes_for_the_next_save(
    db_path: Path, outside: sqlite3.Connection
) -> None:
    store = SQLiteStore(db_path, busy_timeout=0.05)
    try:
        thread = await store.create()
        thread.append(Role.USER, Text("kept"))
        outside.execute("BEGIN EXCLUSIVE")
        with pytest.raises(StoreError, match="locked"):
            await store.save(thread)
        outside.execute("ROLLBACK")
        await store.save(thread)
        assert _texts(await store.get(thread.id)) == ["kept"]
    finally:
        await store.close()


async def test_corrupt_turn_row_makes_get_raise_but_list_skip_it(
    store: SQLiteStore, outside: sqlite3.Connection
) -> None:
    broken = await store.create("broken")
    broken.append(Role.USER, Text("x"))
    await store.save(broken)
    await store.create("fine")
    outside.execute("UPDATE turns SET json = 'not json' WHERE thread_id = 'broken'")
    with pytest.raises(ThreadCorrupt, match=r"thread broken in sqlite:.*ore\.db"):
        await store.get("broken")
    assert [thread.id for thread in await store.list()] == ["fine"]


async def test_two_instances_see_each_others_writes(db_path: Path) -> None:
    first, second = SQLiteStore(db_path), SQLiteStore(db_path)
    try:
        thread = await first.create(metadata={"slack.channel": "C1"})
        thread.append(Role.USER, Text("from first"))
        await first.save(thread)
        seen = await second.get_by("slack.channel", "C1")
        seen.append(Role.ASSISTANT, Text("from second"))
        await second.save(seen)
        assert _texts(await first.get(thread.id)) == ["from first", "from second"]
    finally:
        await first.close()
        await second.close()


async def test_get_or_create_by_on_two_instances_yields_one_thread(db_path: Path) -> None:
    first, second = SQLiteStore(db_path), SQLiteStore(db_path)
    try:
        found = await asyncio.gather(
            *(
                store.get_or_create_by("slack.thread", "same")
                for _ in range(10)
                for store in (first, second)
            )
        )
        assert len({thread.id for thread, _ in found}) == 1
        assert sum(created for _, created in found) == 1
    finally:
        await first.close()
        await second.close()


async def test_get_or_create_by_in_three_processes_yields_one_thread(db_path: Path) -> None:
    processes: list[asyncio.subprocess.Process] = []
    try:
        for _ in range(3):
            processes.append(
                await asyncio.create_subprocess_exec(
                    sys.executable,
                    "-c",
                    GET_OR_CREATE_SCRIPT,
                    str(db_path),
                    stdout=asyncio.subprocess.PIPE,
                )
            )
        outputs = [(await asyncio.wait_for(p.communicate(), 60))[0].split() for p in processes]
    finally:
        for process in processes:
            if process.returncode is None:
                process.kill()
                await process.wait()
    assert [p.returncode for p in processes] == [0, 0, 0]
    assert all(len(ids) == 1 for ids in outputs)
    assert len({ids[0] for ids in outputs}) == 1


# -- group commit, checkpoints, schema migration --------------------------------------------------


def _poison(conn: sqlite3.Connection, resolution: str) -> None:
    """Make SQLite refuse any turn whose JSON mentions "poison" (ABORT: the statement
    fails; ROLLBACK: SQLite abandons the whole transaction)."""
    conn.execute(
        "CREATE TRIGGER poison BEFORE INSERT ON turns WHEN NEW.json LIKE '%poison%'"
        f" BEGIN SELECT RAISE({resolution}, 'poisoned turn'); END"
    )


def _stored_turn_ids(conn: sqlite3.Connection) -> set[str]:
    return {turn_id for (turn_id,) in conn.execute("SELECT turn_id FROM turns")}


async def _trace_commits(store: SQLiteStore) -> list[str]:
    """The COMMIT statements the store's own connection runs from now on."""
    statements: list[str] = []

    def install() -> None:
        store._connection().set_trace_callback(statements.append)

    await store._run(install)
    return statements


async def test_fifty_concurrent_saves_share_one_commit_and_return_once_committed(
    store: SQLiteStore, outside: sqlite3.Connection
) -> None:
    threads = [await store.create() for _ in range(50)]
    commits = await _trace_commits(store)
    visible_on_return: list[bool] = []

    async def save(thread: Thread) -> None:
        turn = thread.append(Role.USER, Text(f"from {thread.id}"))
        await store.save(thread)
        visible_on_return.append(turn.id in _stored_turn_ids(outside))

    results = await queued_together(store._worker, [partial(save, thread) for thread in threads])
    assert results == [None] * 50
    assert visible_on_return == [True] * 50
    assert [sql for sql in commits if sql == "COMMIT"] == ["COMMIT"]


def _saves(statements: list[str]) -> int:
    """How many saves the worker's connection ran (each updates its thread's row once)."""
    return sum(sql.startswith("UPDATE threads") for sql in statements)


async def test_a_lone_save_is_committed_on_the_loop_without_the_worker_thread(
    store: SQLiteStore, outside: sqlite3.Connection
) -> None:
    thread = await store.create()
    worker_statements = await _trace_commits(store)
    turn = thread.append(Role.USER, Text("lone"))
    await store.save(thread)
    assert turn.id in _stored_turn_ids(outside)  # committed when save returned
    await store._run(lambda: None)  # anything the save queued has run by now
    assert worker_statements == []
    assert _texts(await store.get(thread.id)) == ["lone"]


async def test_a_burst_of_saves_is_committed_on_the_loop_in_one_transaction_after_the_first(
    store: SQLiteStore, outside: sqlite3.Connection
) -> None:
    threads = [await store.create() for _ in range(50)]
    worker_statements = await _trace_commits(store)
    assert store._on_loop is not None
    on_loop = store._on_loop._open().connection  # the loop's connection, traced
    loop_statements: list[str] = []
    on_loop.set_trace_callback(loop_statements.append)
    turns = [thread.append(Role.USER, Text(f"from {thread.id}")) for thread in threads]
    await asyncio.gather(*(store.save(thread) for thread in threads))
    assert _stored_turn_ids(outside) == {turn.id for turn in turns}
    await store._run(lambda: None)  # anything the saves queued has run by now
    assert worker_statements == []
    # The first, alone in its iteration so far, at once; the other 49 together.
    assert (_saves(loop_statements), loop_statements.count("COMMIT")) == (50, 2)
    for thread in threads:  # while bursts go on, every save waits for its iteration's end
        thread.append(Role.USER, Text(f"again from {thread.id}"))
    await asyncio.gather(*(store.save(thread) for thread in threads))
    assert (_saves(loop_statements), loop_statements.count("COMMIT")) == (100, 3)


async def test_one_refused_save_of_a_group_fails_alone(
    store: SQLiteStore, outside: sqlite3.Connection
) -> None:
    threads = [await store.create() for _ in range(4)]
    stale = await store.get(threads[2].id)  # a second copy: saved first, the other is stale
    stale.append(Role.USER, Text("the other copy"))
    await store.save(stale)
    turns = [thread.append(Role.USER, Text(f"from {thread.id}")) for thread in threads]
    results = await asyncio.gather(
        *(store.save(thread) for thread in threads), return_exceptions=True
    )
    assert [type(result).__name__ for result in results] == [
        "NoneType",
        "NoneType",
        "StaleThread",
        "NoneType",
    ]
    stored = _stored_turn_ids(outside)
    assert {turn.id for turn in turns if turn.id in stored} == {
        turns[0].id,
        turns[1].id,
        turns[3].id,
    }


async def test_a_burst_meeting_a_write_lock_is_committed_by_the_worker_while_the_loop_runs(
    db_path: Path, outside: sqlite3.Connection
) -> None:
    store = SQLiteStore(db_path, busy_timeout=30)
    try:
        threads = [await store.create() for _ in range(3)]
        worker_statements = await _trace_commits(store)
        for thread in threads:
            thread.append(Role.USER, Text(f"locked out {thread.id}"))
        outside.execute("BEGIN IMMEDIATE")  # another writer holds the lock
        saves = asyncio.gather(*(store.save(thread) for thread in threads))
        for _ in range(200):  # the loop goes on: nothing waits for the lock on it
            await asyncio.sleep(0)
        assert not saves.done()
        outside.execute("ROLLBACK")
        await saves
        assert _saves(worker_statements) == 3
        for thread in threads:
            assert _texts(await store.get(thread.id)) == [f"locked out {thread.id}"]
    finally:
        await store.close()


@pytest.mark.parametrize(
    ("options", "text"),
    [({"fsync": "always"}, "fsynced"), ({}, "x" * (LOOP_COMMIT_MAX_BYTES + 1))],
    ids=["fsync-always", "large"],
)
async def test_fsynced_or_large_saves_are_always_committed_by_the_worker(
    db_path: Path, options: dict[str, str], text: str
) -> None:
    store = SQLiteStore(db_path, **options)  # type: ignore[arg-type]
    try:
        thread = await store.create()
        worker_statements = await _trace_commits(store)
        thread.append(Role.USER, Text(text))
        await store.save(thread)
        assert (_saves(worker_statements), worker_statements.count("COMMIT")) == (1, 1)
    finally:
        await store.close()


async def test_a_save_meeting_a_write_lock_waits_on_the_worker_while_the_loop_runs(
    db_path: Path, outside: sqlite3.Connection
) -> None:
    store = SQLiteStore(db_path, busy_timeout=30)
    try:
        thread = await store.create()
        thread.append(Role.USER, Text("after the lock"))
        outside.execute("BEGIN IMMEDIATE")  # another writer holds the lock
        save = asyncio.ensure_future(store.save(thread))
        # The lock is released only by the loop, after it ran 200 more times: a save
        # that waited for the lock on the loop would hold it until its busy timeout.
        for _ in range(200):
            await asyncio.sleep(0)
        assert not save.done()
        outside.execute("ROLLBACK")
        await save
        assert _texts(await store.get(thread.id)) == ["after the lock"]
    finally:
        await store.close()


async def test_a_save_failing_on_the_loop_raises_and_keeps_its_changes(
    store: SQLiteStore, outside: sqlite3.Connection
) -> None:
    thread = await store.create()
    worker_statements = await _trace_commits(store)
    _poison(outside, "ABORT")
    thread.append(Role.USER, Text("poison"))
    with pytest.raises(StoreError, match="poisoned turn"):
        await store.save(thread)
    await store._run(lambda: None)  # anything the save queued has run by now
    assert (_stored_turn_ids(outside), worker_statements) == (set(), [])  # failed on the loop
    outside.execute("DROP TRIGGER poison")
    await store.save(thread)
    assert _texts(await store.get(thread.id)) == ["poison"]


@pytest.mark.parametrize("resolution", ["ABORT", "ROLLBACK"])
async def test_a_save_that_fails_inside_a_group_fails_only_its_own_caller(
    store: SQLiteStore, outside: sqlite3.Connection, resolution: str
) -> None:
    threads = [await store.create() for _ in range(3)]
    turns = [
        thread.append(Role.USER, Text(text))
        for thread, text in zip(threads, ["fine", "poison", "also fine"], strict=True)
    ]
    _poison(outside, resolution)
    results = await queued_together(
        store._worker, [partial(store.save, thread) for thread in threads]
    )
    assert [type(result).__name__ for result in results] == ["NoneType", "StoreError", "NoneType"]
    assert "poisoned turn" in str(results[1])
    assert _stored_turn_ids(outside) == {turns[0].id, turns[2].id}


async def test_a_save_refused_in_a_group_keeps_its_changes_for_the_next_save(
    store: SQLiteStore, outside: sqlite3.Connection
) -> None:
    fine, refused = await store.create(), await store.create()
    fine.append(Role.USER, Text("fine"))
    refused.append(Role.USER, Text("poison"))
    _poison(outside, "ABORT")
    await queued_together(store._worker, [partial(store.save, fine), partial(store.save, refused)])
    outside.execute("DROP TRIGGER poison")
    await store.save(refused)
    assert _texts(await store.get(refused.id)) == ["poison"]


async def test_a_group_whose_transaction_cannot_start_fails_every_save_then_the_next_works(
    db_path: Path, outside: sqlite3.Connection
) -> None:
    store = SQLiteStore(db_path, busy_timeout=0.05)
    try:
        threads = [await store.create() for _ in range(3)]
        for thread in threads:
            thread.append(Role.USER, Text(f"in {thread.id}"))
        outside.execute("BEGIN IMMEDIATE")  # holds the write lock
        results = await queued_together(
            store._worker, [partial(store.save, thread) for thread in threads]
        )
        outside.execute("ROLLBACK")
        assert all(isinstance(r, StoreError) and "locked" in str(r) for r in results)
        await asyncio.gather(*(store.save(thread) for thread in threads))
        assert [_texts(await store.get(t.id)) for t in threads] == [[f"in {t.id}"] for t in threads]
    finally:
        await store.close()


async def test_saving_an_unchanged_thread_runs_no_statement(store: SQLiteStore) -> None:
    thread = await store.create()
    thread.append(Role.USER, Text("saved"))
    await store.save(thread)
    statements = await _trace_commits(store)
    await store.save(thread)
    await store._run(lambda: None)  # anything the save queued has run by now
    assert statements == []


async def test_commits_reach_the_database_file_without_a_save_checkpointing(
    store: SQLiteStore, db_path: Path, tmp_path: Path
) -> None:
    thread = await store.create()
    turn = thread.append(Role.USER, Text("checkpointed"))
    await store.save(thread)
    copy = tmp_path / "main-file-only.db"  # the database file without its WAL

    def in_main_file() -> bool:
        # A copy taken while the checkpointer writes the file can be torn (a page of the
        # new state next to one of the old): SQLite then reports a malformed database,
        # which only means "look again". The copy is opened read-only and immutable, so
        # SQLite reads exactly its bytes and never looks for a WAL or a lock.
        shutil.copyfile(db_path, copy)
        with closing(sqlite3.connect(f"{copy.as_uri()}?mode=ro&immutable=1", uri=True)) as conn:
            try:
                return turn.id in _stored_turn_ids(conn)
            except sqlite3.DatabaseError:  # torn copy, or not even the schema checkpointed yet
                return False

    # The checkpoint happens on a background thread: poll the file; the timeout only
    # bounds a hang (the checkpointer runs within a second of the commit).
    async with asyncio.timeout(60):
        while True:
            if await asyncio.to_thread(in_main_file):
                break
            await asyncio.sleep(0.01)  # nothing to wait on: another thread writes the file


async def test_close_stops_the_worker_and_checkpoint_threads(db_path: Path) -> None:
    store = SQLiteStore(db_path)
    thread = await store.create()
    thread.append(Role.USER, Text("one"))
    await store.save(thread)
    await store.close()
    assert [t.name for t in threading.enumerate() if t.name.startswith("ore-sqlite")] == []


async def test_a_version_1_database_is_migrated_keeping_each_threads_turn_order(
    db_path: Path,
) -> None:
    with closing(sqlite3.connect(db_path, isolation_level=None)) as conn:
        MIGRATIONS[0](conn)
        conn.execute("PRAGMA user_version = 1")
        conn.execute("INSERT INTO threads VALUES ('t', 'b', '2024-01-01T00:00:00Z', '')")
        for turn_id, parent, seq in [("b", "a", 2), ("a", "", 1)]:  # rows out of seq order
            raw = jsonutil.dumps(turn_to_dict(Turn(turn_id, Role.USER, [Text(turn_id)], parent)))
            conn.execute("INSERT INTO turns VALUES ('t', ?, ?, ?)", (turn_id, raw.decode(), seq))
    store = SQLiteStore(db_path)
    try:
        thread = await store.get("t")
        thread.append(Role.ASSISTANT, Text("c"))
        await store.save(thread)
        reloaded = await store.get("t")
        assert [turn.id for turn in reloaded.all_turns()][:2] == ["a", "b"]
        assert _texts(reloaded) == ["a", "b", "c"]
    finally:
        await store.close()


@pytest.mark.parametrize("count", [1, 2, 8, 9, 20])
async def test_a_save_of_any_number_of_turns_keeps_their_order_and_replaces_in_place(
    store: SQLiteStore, count: int
) -> None:
    # Up to 8 turns go in one multi-row statement, more row by row: same rows either way.
    thread = await store.create()
    appended = [thread.append(Role.USER, Text(f"t{n}")).id for n in range(count)]
    await store.save(thread)
    first = appended[0]
    thread.save_turn(Turn(first, Role.USER, [Text("edited")]))
    appended.append(thread.append(Role.ASSISTANT, Text("more")).id)
    await store.save(thread)
    again = await store.get(thread.id)
    assert [turn.id for turn in again.all_turns()] == appended
    edited = again.get_turn(first)
    assert edited is not None
    assert edited.artifacts == (Text("edited"),)


@pytest.mark.parametrize("count", [2, 9])
async def test_turn_json_is_stored_as_text_exactly_as_encoded(
    store: SQLiteStore, outside: sqlite3.Connection, count: int
) -> None:
    # The JSON is bound as the turn's encoded bytes and CAST to TEXT in the statement:
    # the column holds what a str bound before held (readable by older ore, and by any
    # SQLite tool), also for text beyond ASCII and for the row-by-row path (> 8 turns).
    thread = await store.create()
    turns = [thread.append(Role.USER, Text(f"grüße {n} 🌍")) for n in range(count)]
    await store.save(thread)
    foreign = Thread("t-foreign")
    turns.append(foreign.append(Role.USER, Text("naïve")))
    await store.save(foreign)  # written in full
    rows = dict(
        (turn_id, (kind, raw))
        for turn_id, kind, raw in outside.execute("SELECT turn_id, typeof(json), json FROM turns")
    )
    assert {turn.id: rows[turn.id] for turn in turns} == {
        turn.id: ("text", turn_json(turn).decode()) for turn in turns
    }


async def test_a_grouped_save_of_two_turns_runs_two_statements(store: SQLiteStore) -> None:
    # Per save: the compare-and-set UPDATE of its thread row and one INSERT of both turns;
    # per group: BEGIN and COMMIT. No SELECT, no metadata statement without a change.
    threads = [await store.create() for _ in range(10)]
    statements = await _trace_commits(store)  # every statement, in fact

    async def save(thread: Thread) -> None:
        thread.append(Role.USER, Text("question"))
        thread.append(Role.ASSISTANT, Text("answer"))
        await store.save(thread)

    await queued_together(store._worker, [partial(save, thread) for thread in threads])
    verbs = [sql.split(" ", 2)[:2] for sql in statements]
    assert verbs == [
        ["BEGIN", "IMMEDIATE"],
        *[["UPDATE", "threads"], ["INSERT", "INTO"]] * 10,
        ["COMMIT"],
    ]
