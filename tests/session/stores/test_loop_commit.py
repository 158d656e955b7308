"""LoopCommitter: commits on the loop only a lone save, and only what needs no waiting."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path

import pytest

from ore_core.session.stores.loop_commit import LoopCommitter


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


def _save(committer: LoopCommitter, write: Callable[[sqlite3.Cursor], str]) -> tuple[bool, object]:
    """What the store does per save: count it, commit it on the loop if it is lone."""
    return committer.commit(write) if committer.lone() else (False, None)


def _values(db: sqlite3.Connection) -> list[str]:
    return [value for (value,) in db.execute("SELECT value FROM rows ORDER BY rowid")]


async def test_only_a_lone_save_is_committed(
    committer: LoopCommitter, db: sqlite3.Connection
) -> None:
    assert _save(committer, _insert("first")) == (True, "first")
    assert _save(committer, _insert("a burst")) == (False, None)
    await asyncio.sleep(0)  # the next loop iteration
    assert _save(committer, _insert("right after a burst")) == (False, None)
    await asyncio.sleep(0)
    assert _save(committer, _insert("lone")) == (True, "lone")
    await asyncio.sleep(0)
    assert committer.lone()  # not eligible (the store's decision): counted, not committed
    assert _save(committer, _insert("with an ineligible one")) == (False, None)
    await asyncio.sleep(0)
    assert _save(committer, _insert("right after it")) == (False, None)
    assert _values(db) == ["first", "lone"]


async def test_a_locked_database_is_left_to_the_worker_at_once(
    committer: LoopCommitter, db: sqlite3.Connection
) -> None:
    db.execute("BEGIN IMMEDIATE")
    assert _save(committer, _insert("locked out")) == (False, None)
    db.execute("ROLLBACK")
    # Never a busy wait on the loop: the connection reports a lock instead of waiting.
    assert committer._cursor is not None
    assert committer._cursor.execute("PRAGMA busy_timeout").fetchone() == (0,)
    await asyncio.sleep(0)
    assert _save(committer, _insert("unlocked")) == (True, "unlocked")
    assert _values(db) == ["unlocked"]


async def test_a_failing_write_is_rolled_back_and_raised(
    committer: LoopCommitter, db: sqlite3.Connection
) -> None:
    def fails(cursor: sqlite3.Cursor) -> None:
        cursor.execute("INSERT INTO rows VALUES ('undone')")
        raise ValueError("refused")

    with pytest.raises(ValueError, match="refused"):
        committer.commit(fails)
    await asyncio.sleep(0)
    assert _save(committer, _insert("after")) == (True, "after")
    assert _values(db) == ["after"]
