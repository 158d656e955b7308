"""JournalStore: incremental appends, crash recovery, the metadata index, file locking."""

from __future__ import annotations

import resource
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from ore_core import Role, StaleThread, StoreError, Text, Thread, ThreadCorrupt, TraversalControl
from ore_core.jsonutil import loads
from ore_core.session.stores import JournalStore

GO_JOURNAL = (
    '{"tx_type":"add_turn","timestamp":"2024-01-01T00:00:00Z","payload":{"timestamp":'
    '"2024-01-01T00:00:00Z","turn":{"id":"u1","role":"user","artifacts":[{"kind":"text",'
    '"data":{"kind":"text","content":"hi"}}],"timestamp":"2024-01-01T00:00:00Z"}}}\n'
    '{"tx_type":"update_tip","timestamp":"2024-01-01T00:00:00Z","payload":{"timestamp":'
    '"2024-01-01T00:00:00Z","current_tip":"u1"}}\n'
    '{"tx_type":"update_control","timestamp":"2024-01-01T00:00:00Z","payload":{"timestamp":'
    '"2024-01-01T00:00:00Z","turn_id":"u1","control":"stop"}}\n'
)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[JournalStore]:
    store = JournalStore(tmp_path, fsync="never")
    yield store
    await store.close()


def _journal(store: JournalStore, thread_id: str) -> Path:
    return store.repository.path(thread_id)


def _tx_types(data: bytes) -> list[str]:
    return [loads(line)["tx_type"] for line in data.splitlines()]


def _texts(thread: Thread) -> list[str]:
    return [a.content for turn in thread.turns() for a in turn.artifacts if isinstance(a, Text)]


async def _thread_with_turns(store: JournalStore, *texts: str) -> Thread:
    thread = await store.create()
    for text in texts:
        thread.append(Role.USER, Text(text))
        await store.save(thread)
    return thread


async def test_each_thread_is_a_jsonl_journal_named_after_its_id(store: JournalStore) -> None:
    thread = await store.create("t1")
    assert _journal(store, thread.id) == store.repository.directory / "t1.jsonl"
    assert _tx_types(_journal(store, "t1").read_bytes()) == ["update_tip"]


async def test_saving_after_one_more_turn_appends_exactly_its_lines(store: JournalStore) -> None:
    thread = await _thread_with_turns(store, "one", "two")
    before = _journal(store, thread.id).read_bytes()
    thread.append(Role.ASSISTANT, Text("three"))
    await store.save(thread)
    after = _journal(store, thread.id).read_bytes()
    assert after.startswith(before)
    assert _tx_types(after[len(before) :]) == ["add_turn", "update_tip"]


async def test_a_metadata_change_appends_one_line_go_readers_skip(store: JournalStore) -> None:
    thread = await _thread_with_turns(store, "one")
    before = _journal(store, thread.id).read_bytes()
    thread.meta().set("slack.channel", "C1")
    await store.save(thread)
    added = _journal(store, thread.id).read_bytes()[len(before) :]
    assert _tx_types(added) == ["update_control"]  # of the turn "": see test_journal_go.py


async def test_a_control_change_appends_one_update_control_line(store: JournalStore) -> None:
    thread = await _thread_with_turns(store, "one")
    before = _journal(store, thread.id).read_bytes()
    thread.set_control(thread.current_tip, TraversalControl.STOP)
    await store.save(thread)
    added = _journal(store, thread.id).read_bytes()[len(before) :]
    assert _tx_types(added) == ["update_control"]


async def test_nothing_reaches_the_journal_before_save(store: JournalStore) -> None:
    thread = await _thread_with_turns(store, "one")
    before = _journal(store, thread.id).read_bytes()
    thread.append(Role.USER, Text("unsaved"))
    thread.meta().set("k", "v")
    assert _journal(store, thread.id).read_bytes() == before


async def test_reopen_after_a_torn_last_write_keeps_the_prefix(tmp_path: Path) -> None:
    store = JournalStore(tmp_path)
    thread = await _thread_with_turns(store, "one", "two", "three")
    await store.close()
    path = _journal(store, thread.id)
    data = path.read_bytes()
    path.write_bytes(data[: data.rindex(b'"content":"three"')])  # crash mid-write
    reopened = JournalStore(tmp_path)
    try:
        assert _texts(await reopened.get(thread.id)) == ["one", "two"]
    finally:
        await reopened.close()


async def test_saving_after_a_torn_tail_continues_from_the_prefix(tmp_path: Path) -> None:
    store = JournalStore(tmp_path)
    thread = await _thread_with_turns(store, "one", "two", "three")
    await store.close()
    path = _journal(store, thread.id)
    path.write_bytes(path.read_bytes()[:-10])
    reopened = JournalStore(tmp_path)
    try:
        recovered = await reopened.get(thread.id)
        recovered.append(Role.USER, Text("after the crash"))
        await reopened.save(recovered)
        assert _texts(await reopened.get(thread.id)) == ["one", "two", "after the crash"]
    finally:
        await reopened.close()


async def test_go_written_journal_loads(store: JournalStore) -> None:
    _journal(store, "go-thread").write_text(GO_JOURNAL)
    thread = await store.get("go-thread")
    assert (thread.current_tip, _texts(thread)) == ("u1", ["hi"])
    assert thread.turns()[0].control == TraversalControl.STOP


async def test_journal_without_a_readable_entry_is_corrupt_and_skipped_by_list(
    store: JournalStore,
) -> None:
    await store.create("fine")
    _journal(store, "broken").write_text("garbage\n")
    with pytest.raises(ThreadCorrupt, match=r"broken\.jsonl"):
        await store.get("broken")
    assert [thread.id for thread in await store.list()] == ["fine"]


async def test_get_by_after_restart_finds_threads_from_the_journals(tmp_path: Path) -> None:
    store = JournalStore(tmp_path)
    thread = await store.create(metadata={"slack.channel": "C1"})
    thread.meta().set("slack.channel", "C2")
    await store.save(thread)
    await store.close()
    reopened = JournalStore(tmp_path)
    try:
        assert (await reopened.get_by("slack.channel", "C2")).id == thread.id
        with pytest.raises(LookupError):
            await reopened.get_by("slack.channel", "C1")
    finally:
        await reopened.close()


async def test_saving_a_stale_copy_is_refused_and_appends_nothing(store: JournalStore) -> None:
    thread = await _thread_with_turns(store, "root")
    first = await store.get(thread.id)
    second = await store.get(thread.id)
    kept = first.append(Role.USER, Text("from first"))
    await store.save(first)
    size = _journal(store, thread.id).stat().st_size
    second.append(Role.USER, Text("from second"))
    with pytest.raises(StaleThread, match=thread.id):
        await store.save(second)
    assert _journal(store, thread.id).stat().st_size == size
    assert (await store.get(thread.id)).current_tip == kept.id


async def test_a_second_store_cannot_write_a_thread_the_first_holds(tmp_path: Path) -> None:
    first = JournalStore(tmp_path, lock_timeout=0.05)
    second = JournalStore(tmp_path, lock_timeout=0.05)
    try:
        thread = await _thread_with_turns(first, "held")
        other = await second.get(thread.id)
        other.append(Role.USER, Text("refused"))
        with pytest.raises(StoreError, match="locked"):
            await second.save(other)
    finally:
        await first.close()
        await second.close()


async def test_least_recently_written_journal_is_released_beyond_max_open(
    tmp_path: Path,
) -> None:
    first = JournalStore(tmp_path, lock_timeout=0.05, max_open=2)
    second = JournalStore(tmp_path, lock_timeout=0.05)
    try:
        oldest = await _thread_with_turns(first, "oldest")
        await _thread_with_turns(first, "newer")
        await _thread_with_turns(first, "newest")
        other = await second.get(oldest.id)
        other.append(Role.USER, Text("written by the second store"))
        await second.save(other)
        assert _texts(await second.get(oldest.id)) == ["oldest", "written by the second store"]
    finally:
        await first.close()
        await second.close()


async def test_saving_an_unchanged_thread_appends_nothing(store: JournalStore) -> None:
    thread = await _thread_with_turns(store, "one")
    before = _journal(store, thread.id).read_bytes()
    await store.save(thread)
    assert _journal(store, thread.id).read_bytes() == before


@pytest.mark.parametrize(
    ("soft_limit", "max_open"),
    [(1024, 256), (8192, 2048), (1_000_000, 4096), (resource.RLIM_INFINITY, 4096)],
)
def test_default_max_open_is_a_quarter_of_the_open_file_limit_within_256_and_4096(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, soft_limit: int, max_open: int
) -> None:
    monkeypatch.setattr(resource, "getrlimit", lambda _: (soft_limit, resource.RLIM_INFINITY))
    assert JournalStore(tmp_path)._max_open == max_open
