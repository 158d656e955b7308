"""LoopCommitter: a loop iteration's saves in one transaction on the loop, never waiting."""

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
def commits() -> list[str]:
    """Every commit the committer reports (`on_commit`)."""
    return []


@pytest.fixture
def committer(db: sqlite3.Connection, commits: list[str]) -> Iterator[LoopCommitter]:
    ((_, _, path),) = db.execute("PRAGMA database_list").fetchall()
    committer = LoopCommitter(
        path, synchronous="NORMAL", autocheckpoint=4000, on_commit=lambda: commits.append("commit")
    )
    yield committer
    committer.close()


def _insert(value: str) -> Callable[[sqlite3.Cursor], str]:
    def write(cursor: sqlite3.Cursor) -> str:
        cursor.execute("INSERT INTO rows VALUES (?)", (value,))
        return value

    return write


def _values(db: sqlite3.Connection) -> list[str]:
    return [value for (value,) in db.execute("SELECT value FROM rows ORDER BY rowid")]


async def _outcomes(committer: LoopCommitter, *values: str) -> list[object]:
    futures = [committer.add(_insert(value), len(value)) for value in values]
    assert None not in futures
    return list(await asyncio.gather(*futures))  # type: ignore[arg-type]


async def test_an_iterations_saves_are_committed_together_at_its_end(
    committer: LoopCommitter, db: sqlite3.Connection, commits: list[str]
) -> None:
    first = committer.add(_insert("first"), 5)
    second = committer.add(_insert("second"), 6)
    assert first is not None
    assert second is not None
    assert (first.done(), _values(db)) == (False, [])  # nothing yet: the iteration goes on
    assert await asyncio.gather(first, second) == [(True, "first"), (True, "second")]
    assert (_values(db), commits) == (["first", "second"], ["commit"])
    assert await _outcomes(committer, "next") == [(True, "next")]
    assert commits == ["commit", "commit"]


async def test_saves_past_the_iterations_bytes_are_left_to_the_worker(
    committer: LoopCommitter, db: sqlite3.Connection
) -> None:
    big = committer.add(_insert("big"), LoopCommitter.MAX_BYTES - 1)
    assert committer.add(_insert("over"), 2) is None
    assert await big == (True, "big")
    assert await _outcomes(committer, "next iteration") == [(True, "next iteration")]
    assert _values(db) == ["big", "next iteration"]


async def test_a_locked_database_is_left_to_the_worker_at_once(
    committer: LoopCommitter, db: sqlite3.Connection, commits: list[str]
) -> None:
    db.execute("BEGIN IMMEDIATE")
    assert await _outcomes(committer, "locked", "out") == [(False, None), (False, None)]
    db.execute("ROLLBACK")
    # Never a busy wait on the loop: the connection reports a lock instead of waiting.
    assert committer._cursor is not None
    assert committer._cursor.execute("PRAGMA busy_timeout").fetchone() == (0,)
    assert await _outcomes(committer, "unlocked") == [(True, "unlocked")]
    assert (_values(db), commits) == (["unlocked"], ["commit"])


def _fails(cursor: sqlite3.Cursor) -> None:
    cursor.execute("INSERT INTO rows VALUES ('undone')")
    raise ValueError("refused")


async def test_a_lone_failing_write_is_rolled_back_and_raised(
    committer: LoopCommitter, db: sqlite3.Connection
) -> None:
    failing = committer.add(_fails, 1)
    assert failing is not None
    with pytest.raises(ValueError, match="refused"):
        await failing
    assert await _outcomes(committer, "after") == [(True, "after")]
    assert _values(db) == ["after"]


async def test_a_group_with_a_failing_write_is_rolled_back_and_left_to_the_worker(
    committer: LoopCommitter, db: sqlite3.Connection, commits: list[str]
) -> None:
    fine = committer.add(_insert("fine"), 4)
    failing = committer.add(_fails, 1)
    assert await asyncio.gather(fine, failing) == [(False, None), (False, None)]  # type: ignore[arg-type]
    assert (_values(db), commits) == ([], [])
