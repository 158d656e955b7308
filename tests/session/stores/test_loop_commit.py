"""LoopCommitter: a lone save at once, a loop iteration's saves in one transaction on the
loop, never waiting."""

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


async def test_a_lone_save_is_committed_at_once_and_a_burst_at_its_iterations_end(
    committer: LoopCommitter, db: sqlite3.Connection, commits: list[str]
) -> None:
    lone = committer.add(_insert("lone"), 4)
    assert lone is not None
    assert (lone.done(), _values(db)) == (True, ["lone"])  # its caller need not wait
    second = committer.add(_insert("second"), 6)
    third = committer.add(_insert("third"), 5)
    assert second is not None
    assert third is not None
    assert (second.done(), _values(db)) == (False, ["lone"])  # the iteration goes on
    assert await asyncio.gather(second, third) == [(True, "second"), (True, "third")]
    assert (_values(db), commits) == (["lone", "second", "third"], ["commit"] * 2)
    # Right after a burst, a first save waits for its iteration's commit too.
    after = committer.add(_insert("after the burst"), 15)
    assert after is not None
    assert not after.done()
    assert await after == (True, "after the burst")
    assert commits == ["commit"] * 3


async def test_saves_past_the_iterations_bytes_are_left_to_the_worker(
    committer: LoopCommitter, db: sqlite3.Connection
) -> None:
    lone = committer.add(_insert("lone"), 4)
    big = committer.add(_insert("big"), LoopCommitter.MAX_BYTES - 1)
    assert committer.add(_insert("over"), 2) is None
    assert await asyncio.gather(lone, big) == [(True, "lone"), (True, "big")]  # type: ignore[arg-type]
    assert _values(db) == ["lone", "big"]


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
    lone = committer.add(_insert("lone"), 4)  # committed at once
    fine = committer.add(_insert("fine"), 4)  # a burst: it waits for its iteration's end
    failing = committer.add(_fails, 1)
    outcomes = await asyncio.gather(lone, fine, failing)  # type: ignore[arg-type]
    assert outcomes == [(True, "lone"), (False, None), (False, None)]
    assert (_values(db), commits) == (["lone"], ["commit"])
