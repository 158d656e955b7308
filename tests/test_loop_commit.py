"""LoopCommitter: a lone save at once, a burst in one transaction, never a wait on the loop."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path

import pytest

from ore_core.session.stores.loop_commit import HANDED_BACK, LoopCommitter


@pytest.fixture
def db(tmp_path: Path) -> Iterator[sqlite3.Connection]:
    path = tmp_path / "loop.db"
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("CREATE TABLE rows (value TEXT)")
        yield conn


@pytest.fixture
def committer(db: sqlite3.Connection) -> Iterator[LoopCommitter]:
    ((_, _, path),) = db.execute("PRAGMA database_list").fetchall()
    committer = LoopCommitter(path, synchronous="NORMAL", autocheckpoint=4000)
    yield committer
    committer.close()


def _insert(value: str) -> Callable[[sqlite3.Cursor], str]:
    def write(cursor: sqlite3.Cursor) -> str:
        cursor.execute("INSERT INTO rows VALUES (?)", (value,))
        return value

    return write


def _values(db: sqlite3.Connection) -> list[str]:
    return [value for (value,) in db.execute("SELECT value FROM rows ORDER BY rowid")]


async def test_a_lone_save_is_committed_at_once_and_a_burst_together(
    committer: LoopCommitter, db: sqlite3.Connection
) -> None:
    first = committer.commit(_insert("first"))
    assert first is not None
    assert first.done()
    assert first.result() == "first"
    burst = [committer.commit(_insert(f"burst {n}")) for n in range(3)]
    assert _values(db) == ["first"]  # the burst waits for the end of the iteration
    assert [await future for future in burst if future is not None] == [
        "burst 0",
        "burst 1",
        "burst 2",
    ]
    assert (_values(db)[1:], committer.commits) == (["burst 0", "burst 1", "burst 2"], 2)
    after = committer.commit(_insert("right after a burst"))  # joins a group of its own
    assert after is not None
    assert not after.done()
    assert await after == "right after a burst"
    await asyncio.sleep(0)
    lone = committer.commit(_insert("lone"))
    assert lone is not None
    assert lone.done()
    assert committer.commits == 4


async def test_a_locked_database_is_left_to_the_worker_at_once(
    committer: LoopCommitter, db: sqlite3.Connection
) -> None:
    db.execute("BEGIN IMMEDIATE")
    assert committer.commit(_insert("locked out")) is None
    grouped = committer.commit(_insert("locked out too"))
    assert grouped is not None
    assert await grouped is HANDED_BACK
    db.execute("ROLLBACK")
    # Never a busy wait on the loop: the connection reports a lock instead of waiting.
    assert committer._cursor is not None
    assert committer._cursor.execute("PRAGMA busy_timeout").fetchone() == (0,)
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    unlocked = committer.commit(_insert("unlocked"))
    assert unlocked is not None
    assert await unlocked == "unlocked"
    assert _values(db) == ["unlocked"]


def _fails(cursor: sqlite3.Cursor) -> None:
    cursor.execute("INSERT INTO rows VALUES ('undone')")
    raise ValueError("refused")


async def test_a_failing_write_is_rolled_back_and_raised(
    committer: LoopCommitter, db: sqlite3.Connection
) -> None:
    failed = committer.commit(_fails)
    assert failed is not None
    with pytest.raises(ValueError, match="refused"):
        await failed
    await asyncio.sleep(0)
    after = committer.commit(_insert("after"))
    assert after is not None
    assert await after == "after"
    assert _values(db) == ["after"]


async def test_a_failing_write_in_a_group_fails_alone(
    committer: LoopCommitter, db: sqlite3.Connection
) -> None:
    lone = committer.commit(_insert("lone"))
    assert lone is not None
    group = [committer.commit(write) for write in (_insert("kept 1"), _fails, _insert("kept 2"))]
    outcomes = await asyncio.gather(*(f for f in group if f is not None), return_exceptions=True)
    assert outcomes[0] == "kept 1"
    assert outcomes[2] == "kept 2"
    assert isinstance(outcomes[1], ValueError)
    assert _values(db) == ["lone", "kept 1", "kept 2"]


async def test_a_group_still_waiting_when_the_committer_closes_goes_to_the_worker(
    committer: LoopCommitter, db: sqlite3.Connection
) -> None:
    assert committer.commit(_insert("lone")) is not None
    waiting = committer.commit(_insert("grouped"))
    committer.close()
    assert waiting is not None
    assert await waiting is HANDED_BACK
    assert _values(db) == ["lone"]
