"""FileRepository: one append-only, locked `.jsonl` journal per thread.

docs/go-compatibility.md ("The journal", defects 9 and 10): file names that
cannot collide or escape, a lock across processes, fsync policies, tolerated torn lines.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ore_core import JournalLocked, LedgerError, Role, Text, Thread, TraversalControl, Turn
from ore_core.ledger.clock import FixedClock
from ore_core.ledger.file_repository import FileRepository, FsyncPolicy, journal_file_name
from ore_core.ledger.journal import Repository

T0 = datetime(2024, 1, 1, tzinfo=UTC)
WRITER_PROC = Path(__file__).with_name("journal_writer_proc.py")

GO_JOURNAL = (
    b'{"tx_type":"add_turn","timestamp":"2024-01-01T00:00:00Z","payload":{"timestamp":'
    b'"2024-01-01T00:00:00Z","turn":{"id":"u1","role":"user","artifacts":[{"kind":"text",'
    b'"data":{"kind":"text","content":"hi"}}],"timestamp":"2024-01-01T00:00:00Z"}}}\n'
    b'{"tx_type":"update_tip","timestamp":"2024-01-01T00:00:00.123456789Z","payload":'
    b'{"timestamp":"2024-01-01T00:00:00.123456789Z","current_tip":"u1"}}\n'
)


def turn(turn_id: str, parent_id: str = "") -> Turn:
    role = Role.USER if turn_id.startswith("u") else Role.ASSISTANT
    return Turn(turn_id, role, [Text(turn_id)], parent_id=parent_id, timestamp=T0)


@pytest.fixture
def repository(tmp_path: Path) -> Iterator[FileRepository]:
    with FileRepository(tmp_path / "journals", clock=FixedClock(T0)) as repo:
        yield repo


def lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True)


# -- layout --------------------------------------------------------------------------------------


def test_file_repository_meets_the_repository_protocol(repository: FileRepository) -> None:
    repo: Repository = repository
    assert repo.thread_ids() == []


def test_nested_directory_is_created(tmp_path: Path) -> None:
    with FileRepository(tmp_path / "a" / "b" / "c"):
        assert (tmp_path / "a" / "b" / "c").is_dir()


def test_directory_that_cannot_be_created_is_named_in_the_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a directory")
    with pytest.raises(LedgerError, match="journals"):
        FileRepository(tmp_path / "file" / "journals")


def test_unknown_fsync_policy_is_refused(tmp_path: Path) -> None:
    with pytest.raises(LedgerError, match="sometimes"):
        FileRepository(tmp_path, fsync="sometimes")


def test_saved_turn_lands_in_the_thread_file(repository: FileRepository) -> None:
    repository.save_turn("thread-1", turn("u1"))
    assert (repository.directory / "thread-1.jsonl").is_file()
    assert repository.hydrate("thread-1").turns == {"u1": turn("u1")}


def test_each_call_appends_one_newline_terminated_line(repository: FileRepository) -> None:
    for turn_id in ["u1", "a1", "u2"]:
        repository.save_turn("t", turn(turn_id))
    written = lines(repository.path("t"))
    assert len(written) == 3
    assert all(line.endswith(b"\n") for line in written)


def test_go_written_journal_loads(repository: FileRepository) -> None:
    (repository.directory / "thread-1.jsonl").write_bytes(GO_JOURNAL)
    state = repository.hydrate("thread-1")
    assert (list(state.turns), state.tip, state.problem) == (["u1"], "u1", None)


@pytest.mark.parametrize(
    ("thread_id", "name"),
    [
        ("thread-1", "thread-1.jsonl"),
        ("a_b", "a_b.jsonl"),
        ("a/b", "~a%2Fb.jsonl"),
        ("../escape", "~%2E%2E%2Fescape.jsonl"),
        ("with spaces", "~with%20spaces.jsonl"),
        ("", "~.jsonl"),
        ("é", "~%C3%A9.jsonl"),
        ("x" * 129, "~" + "x" * 129 + ".jsonl"),
    ],
)
def test_file_names(thread_id: str, name: str) -> None:
    assert journal_file_name(thread_id) == name


def test_an_id_too_long_for_a_file_name_is_hashed() -> None:
    name = journal_file_name("/" * 100)
    assert name.startswith("~~")
    assert len(name) == 2 + 64 + len(".jsonl")


# Alphabets that make near-misses likely: separators, escapes, dots and non-ASCII.
IDS = st.one_of(
    st.text(alphabet="a_-/.~%2F", max_size=12),
    st.text(alphabet=st.characters(codec=None), max_size=40),
    st.text(alphabet="ab/", min_size=80, max_size=300),
)


@given(IDS, IDS)
def test_distinct_ids_get_distinct_file_names(first: str, second: str) -> None:
    if first != second:
        assert journal_file_name(first) != journal_file_name(second)


@given(IDS)
def test_file_names_stay_inside_the_directory(thread_id: str) -> None:
    name = journal_file_name(thread_id)
    assert "/" not in name
    assert "\x00" not in name
    assert not name.startswith(".")
    assert len(name.encode("utf-8", "surrogatepass")) <= 255


@settings(max_examples=40, deadline=None)
@given(IDS)
def test_thread_ids_maps_every_file_back_to_its_id(thread_id: str) -> None:
    with tempfile.TemporaryDirectory() as directory, FileRepository(directory) as repo:
        repo.update_tip(thread_id, "tip")
        assert repo.thread_ids() == [thread_id]
        assert repo.hydrate(thread_id).tip == "tip"


def test_thread_ids_ignores_files_it_did_not_name(repository: FileRepository) -> None:
    repository.update_tip("t", "x")
    for foreign in ["notes.txt", "foo.bar.jsonl", "~%41.jsonl", "~~deadbeef.jsonl"]:
        (repository.directory / foreign).write_text("")
    assert repository.thread_ids() == ["t"]


def test_deleting_a_hashed_thread_removes_its_id_file(repository: FileRepository) -> None:
    long_id = "/" * 100
    repository.update_tip(long_id, "x")
    assert repository.thread_ids() == [long_id]
    assert repository.delete(long_id)
    assert list(repository.directory.iterdir()) == []


# -- round trips -----------------------------------------------------------------------------------


def test_full_conversation_round_trips(repository: FileRepository) -> None:
    parent = ""
    for turn_id in ["u1", "a1", "u2", "summary", "u3", "a3"]:
        repository.save_turn("t", turn(turn_id, parent_id=parent))
        parent = turn_id
    repository.update_tip("t", "u2")
    repository.update_control("t", "summary", TraversalControl.STOP)
    repository.update_tip("t", "a3")
    thread = Thread.from_journal(repository, "t", bind=False)
    assert (thread.current_tip, len(thread)) == ("a3", 6)
    assert [t.id for t in thread.turns()] == ["summary", "u3", "a3"]


def test_control_and_parent_updates_are_replayed(repository: FileRepository) -> None:
    repository.save_turn("t", turn("a1", parent_id="u1"))
    repository.update_control("t", "a1", TraversalControl.SKIP)
    repository.update_parent("t", "a1", "")
    replayed = repository.hydrate("t").turns["a1"]
    assert (replayed.control, replayed.parent_id) == (TraversalControl.SKIP, "")


def test_missing_file_hydrates_empty_without_a_problem(repository: FileRepository) -> None:
    state = repository.hydrate("nope")
    assert (state.turns, state.tip, state.problem) == ({}, "", None)


def test_threads_are_kept_apart(repository: FileRepository) -> None:
    repository.save_turn("a", turn("u1"))
    repository.save_turn("b", turn("u2"))
    assert list(repository.hydrate("a").turns) == ["u1"]
    assert list(repository.hydrate("b").turns) == ["u2"]


def test_bound_thread_metadata_survives_a_reopen(tmp_path: Path) -> None:
    with FileRepository(tmp_path) as first:
        thread = Thread.from_journal(first, "t")
        thread.meta().set("title", "x")
        thread.meta().set("model", "m")
        thread.meta().delete("title")
    with FileRepository(tmp_path) as second:
        assert Thread.from_journal(second, "t").meta().all() == {"model": "m"}


# -- damaged files ---------------------------------------------------------------------------------


def test_truncated_last_line_is_tolerated(repository: FileRepository) -> None:
    for turn_id in ["turn-1", "turn-2", "turn-3"]:
        repository.save_turn("t", turn(turn_id))
    path = repository.path("t")
    path.write_bytes(path.read_bytes()[:-20])
    state = repository.hydrate("t")
    assert list(state.turns) == ["turn-1", "turn-2"]
    assert state.problem is not None
    assert "line 3" in state.problem
    assert "torn" in state.problem


def test_append_torn_inside_its_tip_line_leaves_the_previous_state(
    repository: FileRepository,
) -> None:
    thread = Thread.from_journal(repository, "t")
    first = thread.append(Role.USER, Text("one"))
    thread.append(Role.ASSISTANT, Text("two"))
    path = repository.path("t")
    path.write_bytes(path.read_bytes()[:-10])
    state = Thread.from_journal(repository, "t", bind=False)
    assert (state.current_tip, len(state)) == (first.id, 1)


def test_blank_lines_are_skipped(repository: FileRepository) -> None:
    path = repository.directory / "thread-1.jsonl"
    path.write_bytes(b"\n" + GO_JOURNAL.replace(b"\n", b"\n  \n", 1))
    state = repository.hydrate("thread-1")
    assert (state.tip, state.problem) == ("u1", None)


def test_garbage_line_stops_replay_and_names_the_line(repository: FileRepository) -> None:
    path = repository.directory / "thread-1.jsonl"
    path.write_bytes(GO_JOURNAL.replace(b"\n", b"\n{oops\n", 1))
    state = repository.hydrate("thread-1")
    assert (list(state.turns), state.tip) == (["u1"], "")
    assert state.problem is not None
    assert "line 2" in state.problem
    assert str(path) in state.problem


def test_line_longer_than_the_limit_stops_replay_quietly(tmp_path: Path) -> None:
    with FileRepository(tmp_path) as writer:
        writer.save_turn("t", turn("u1"))
        writer.save_turn("t", Turn("a1", Role.ASSISTANT, [Text("x" * 1000)]))
    with FileRepository(tmp_path, max_line_bytes=600) as reader:
        state = reader.hydrate("t")
    assert list(state.turns) == ["u1"]
    assert state.problem is not None
    assert "longer than 600 bytes" in state.problem


def test_entry_longer_than_the_limit_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    with FileRepository(tmp_path, max_line_bytes=600) as repo:
        thread = Thread.from_journal(repo, "t")
        with pytest.raises(LedgerError, match="max_line_bytes=600"):
            thread.append(Role.USER, Text("x" * 1000))
        assert (len(thread), repo.exists("t")) == (0, False)


def test_writing_after_a_torn_tail_cuts_it_off_and_keeps_it_aside(tmp_path: Path) -> None:
    with FileRepository(tmp_path) as repo:
        repo.save_turn("t", turn("u1"))
    path = tmp_path / "t.jsonl"
    with path.open("ab") as file:
        file.write(b'{"tx_type":"add_tu')
    with FileRepository(tmp_path) as repo:
        repo.save_turn("t", turn("u2"))
        state = repo.hydrate("t")
    assert (list(state.turns), state.problem) == (["u1", "u2"], None)
    aside = list(tmp_path.glob("t.jsonl.torn-*"))
    assert [p.read_bytes() for p in aside] == [b'{"tx_type":"add_tu']


def test_writing_after_a_half_written_group_drops_the_whole_group(tmp_path: Path) -> None:
    with FileRepository(tmp_path) as repo:
        thread = Thread.from_journal(repo, "t")
        first = thread.append(Role.USER, Text("one"))
        thread.append(Role.ASSISTANT, Text("two"))
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"".join(lines(path)[:-1]))  # the last append lost its tip line
    with FileRepository(tmp_path) as repo:
        thread = Thread.from_journal(repo, "t")
        third = thread.append(Role.ASSISTANT, Text("three"))
        state = repo.hydrate("t")
    assert set(state.turns) == {first.id, third.id}
    assert (state.tip, state.problem) == (third.id, None)


def test_writing_after_a_garbage_line_keeps_new_entries_readable(tmp_path: Path) -> None:
    path = tmp_path / "thread-1.jsonl"
    path.write_bytes(GO_JOURNAL.replace(b"\n", b"\nnot json\n", 1))
    with FileRepository(tmp_path) as repo:
        repo.update_tip("thread-1", "u1")
        state = repo.hydrate("thread-1")
    assert (list(state.turns), state.tip, state.problem) == (["u1"], "u1", None)


# -- incremental writes ----------------------------------------------------------------------------


def test_append_is_one_write_of_two_lines(
    repository: FileRepository, monkeypatch: pytest.MonkeyPatch
) -> None:
    thread = Thread.from_journal(repository, "t")
    thread.append(Role.USER, Text("open the file first"))
    writes: list[bytes] = []
    real_write = os.write

    def recording_write(fd: int, data: bytes) -> int:
        writes.append(bytes(data))
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", recording_write)
    thread.append(Role.ASSISTANT, Text("hello"))
    assert len(writes) == 1
    assert writes[0].count(b"\n") == 2


def test_the_file_is_opened_once_and_only_grows(
    repository: FileRepository, monkeypatch: pytest.MonkeyPatch
) -> None:
    repository.update_tip("t", "a")
    before = repository.path("t").read_bytes()
    inode = repository.path("t").stat().st_ino
    opened: list[object] = []
    real_open = os.open
    writer = threading.get_ident()

    def recording_open(*args: Any, **kwargs: Any) -> int:
        if threading.get_ident() == writer:  # not the group commit's directory fsync
            opened.append(args)
        return real_open(*args, **kwargs)

    monkeypatch.setattr(os, "open", recording_open)
    repository.update_tip("t", "b")
    repository.update_tip("t", "c")
    assert opened == []
    assert repository.path("t").read_bytes().startswith(before)
    assert repository.path("t").stat().st_ino == inode


def test_writer_is_the_same_object_for_a_thread(repository: FileRepository) -> None:
    assert repository.writer("t") is repository.writer("t")


def test_exists_and_delete(repository: FileRepository) -> None:
    assert not repository.exists("t")
    repository.update_tip("t", "x")
    assert repository.exists("t")
    assert repository.delete("t") is True
    assert (repository.exists("t"), repository.delete("t")) == (False, False)


def test_writing_after_delete_starts_a_new_journal(repository: FileRepository) -> None:
    repository.update_tip("t", "old")
    repository.delete("t")
    repository.update_tip("t", "new")
    assert len(lines(repository.path("t"))) == 1
    assert repository.hydrate("t").tip == "new"


def test_writes_after_close_are_refused_and_close_is_idempotent(tmp_path: Path) -> None:
    repo = FileRepository(tmp_path)
    repo.update_tip("t", "x")
    repo.close()
    repo.close()
    with pytest.raises(LedgerError, match="closed"):
        repo.update_tip("t", "y")
    assert repo.hydrate("t").tip == "x"


def test_concurrent_writers_in_threads_never_interleave_lines(tmp_path: Path) -> None:
    with FileRepository(tmp_path) as repo:
        start = threading.Barrier(4)

        def write(n: int) -> None:
            start.wait()
            for i in range(100):
                repo.writer("t").add_turn(turn(f"u{n}-{i}"), tip=f"u{n}-{i}")

        workers = [threading.Thread(target=write, args=(n,)) for n in range(4)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        state = repo.hydrate("t")
    assert (len(state.turns), state.entries, state.problem) == (400, 800, None)


# -- locking ---------------------------------------------------------------------------------------


@contextmanager
def child_holding(directory: Path, thread_id: str) -> Iterator[subprocess.Popen[str]]:
    """A second process that has written `thread_id` and holds its lock until stdin closes."""
    child = subprocess.Popen(
        [sys.executable, str(WRITER_PROC), str(directory), thread_id],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == "locked\n"
        yield child
    finally:
        if child.poll() is None:
            child.kill()
        child.wait(timeout=10)
        for stream in (child.stdin, child.stdout):
            if stream is not None:
                stream.close()


def test_second_process_gets_journal_locked_naming_file_and_holder(tmp_path: Path) -> None:
    with (
        child_holding(tmp_path, "t") as child,
        FileRepository(tmp_path, lock_timeout=0.1) as repo,
    ):
        with pytest.raises(JournalLocked) as caught:
            repo.update_tip("t", "mine")
        assert str(repo.path("t")) in str(caught.value)
        assert f"process {child.pid}" in str(caught.value)


def test_waiting_writer_appends_after_the_holder_releases(tmp_path: Path) -> None:
    with child_holding(tmp_path, "t") as child, FileRepository(tmp_path, lock_timeout=60) as repo:
        assert child.stdin is not None
        child.stdin.write("append 20\n")
        child.stdin.close()
        repo.update_tip("t", "parent")  # blocks until the child has closed its repository
        state = repo.hydrate("t")
        assert child.wait(timeout=10) == 0
    assert (len(state.turns), state.tip, state.problem) == (21, "parent", None)


def test_second_repository_in_one_process_is_locked_out_until_release(tmp_path: Path) -> None:
    with FileRepository(tmp_path) as first, FileRepository(tmp_path, lock_timeout=0.05) as second:
        first.update_tip("t", "a")
        with pytest.raises(JournalLocked, match="this process"):
            second.update_tip("t", "b")
        first.release("t")
        second.update_tip("t", "b")
        assert second.hydrate("t").tip == "b"


def test_delete_waits_for_the_lock_of_another_writer(tmp_path: Path) -> None:
    with FileRepository(tmp_path) as first, FileRepository(tmp_path, lock_timeout=0.05) as second:
        first.update_tip("t", "a")
        with pytest.raises(JournalLocked):
            second.delete("t")
        assert first.exists("t")


# -- fsync policies -------------------------------------------------------------------------------


@pytest.fixture
def fsynced(monkeypatch: pytest.MonkeyPatch) -> tuple[list[int], threading.Event]:
    """Records the inode of every fsync'd file; the event is set on each fsync."""
    inodes: list[int] = []
    happened = threading.Event()
    real_fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        real_fsync(fd)
        inodes.append(os.fstat(fd).st_ino)
        happened.set()

    monkeypatch.setattr(os, "fsync", recording_fsync)
    return inodes, happened


def test_always_fsyncs_every_write(
    tmp_path: Path, fsynced: tuple[list[int], threading.Event]
) -> None:
    inodes, _ = fsynced
    with FileRepository(tmp_path, fsync=FsyncPolicy.ALWAYS) as repo:
        for tip in ["a", "b", "c"]:
            repo.update_tip("t", tip)
        file_inode = repo.path("t").stat().st_ino
        assert inodes.count(file_inode) == 3
        assert tmp_path.stat().st_ino in inodes  # the new file's directory entry too


def test_never_leaves_fsync_to_the_os_even_on_flush_and_close(
    tmp_path: Path, fsynced: tuple[list[int], threading.Event]
) -> None:
    inodes, _ = fsynced
    with FileRepository(tmp_path, fsync="never") as repo:
        repo.update_tip("t", "a")
        repo.flush()
    assert inodes == []


def test_batch_fsyncs_in_the_background(
    tmp_path: Path, fsynced: tuple[list[int], threading.Event]
) -> None:
    inodes, happened = fsynced
    with FileRepository(tmp_path, fsync="batch") as repo:
        repo.update_tip("t", "a")
        assert happened.wait(timeout=10)
        assert repo.path("t").stat().st_ino in inodes


def test_batch_flush_fsyncs_what_the_flusher_has_not_reached(
    tmp_path: Path, fsynced: tuple[list[int], threading.Event]
) -> None:
    inodes, happened = fsynced
    with FileRepository(tmp_path, fsync="batch", batch_interval=3600) as repo:
        repo.update_tip("t", "a")
        assert happened.wait(timeout=10)  # the flusher's first round; the next is an hour away
        repo.update_tip("other", "b")
        repo.flush()
        assert repo.path("other").stat().st_ino in inodes


def test_batch_close_fsyncs_what_the_flusher_has_not_reached(
    tmp_path: Path, fsynced: tuple[list[int], threading.Event]
) -> None:
    inodes, happened = fsynced
    repo = FileRepository(tmp_path, fsync="batch", batch_interval=3600)
    repo.update_tip("t", "a")
    assert happened.wait(timeout=10)
    repo.update_tip("other", "b")
    repo.close()
    assert (tmp_path / "other.jsonl").stat().st_ino in inodes


def test_failed_fsync_is_raised_and_stays_raised(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def failing_fsync(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    repo = FileRepository(tmp_path, fsync="batch", batch_interval=3600)
    repo.update_tip("t", "a")
    with pytest.raises(LedgerError, match="may be lost"):
        repo.flush()
    with pytest.raises(LedgerError, match="may be lost"):
        repo.update_tip("t", "b")
    with pytest.raises(LedgerError, match="may be lost"):
        repo.close()
