"""JSONStore: the Go thread file format, atomic writes, and the Go store's bugs fixed."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from ore_core import (
    InvalidThreadId,
    Role,
    StaleThread,
    StoreError,
    Text,
    Thread,
    ThreadCorrupt,
    ThreadExists,
    TraversalControl,
    Turn,
)
from ore_core.jsonutil import loads
from ore_core.ledger.clock import FixedClock
from ore_core.session.stores import JSONStore

START = datetime(2024, 1, 1, tzinfo=UTC)

GO_WRITTEN = (
    '{"id":"go-thread","current_tip":"a1","metadata":{"slack_thread_id":"1712.0001"},'
    '"turns":['
    '{"id":"a1","parent_id":"u1","role":"assistant","artifacts":[{"kind":"text","data":'
    '{"kind":"text","content":"hi there"}}],"timestamp":"2024-01-01T00:00:01.123456789Z",'
    '"metadata":{"control":"stop"}},'
    '{"id":"u1","role":"user","artifacts":[{"kind":"text","data":{"kind":"text",'
    '"content":"hello"}}],"timestamp":"2024-01-01T00:00:00Z"}]}'
)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[JSONStore]:
    store = JSONStore(tmp_path / "threads")
    yield store
    await store.close()


def _file(store: JSONStore, thread_id: str) -> Path:
    return store.directory / f"{thread_id}.json"


def _texts(thread: Thread) -> list[str]:
    return [a.content for turn in thread.turns() for a in turn.artifacts if isinstance(a, Text)]


async def test_thread_file_uses_the_go_format(store: JSONStore) -> None:
    thread = await store.create(metadata={"slack_thread_id": "1712.0001"})
    turn = thread.append(Role.USER, Text("hello"))
    await store.save(thread)
    data = loads(_file(store, thread.id).read_bytes())
    assert list(data) == ["id", "current_tip", "metadata", "turns"]
    assert data["current_tip"] == turn.id
    assert data["metadata"] == {"slack_thread_id": "1712.0001"}
    assert data["turns"][0]["artifacts"] == [
        {"kind": "text", "data": {"kind": "text", "content": "hello"}}
    ]


async def test_empty_tip_and_metadata_are_left_out_of_the_file(store: JSONStore) -> None:
    thread = await store.create("empty")
    assert loads(_file(store, thread.id).read_bytes()) == {"id": "empty", "turns": []}


async def test_turns_are_written_by_timestamp_then_id(store: JSONStore) -> None:
    thread = Thread("sorted", clock=FixedClock(START, step=timedelta(seconds=1)))
    first = thread.append(Role.USER, Text("first"))
    thread.append(Role.ASSISTANT, Text("second"))
    thread.save_turn(Turn("zz-early", Role.SYSTEM, timestamp=START - timedelta(days=1)))
    thread.save_turn(Turn("same-time", Role.SYSTEM, timestamp=first.timestamp))
    thread.save_turn(Turn("unstamped", Role.SYSTEM))
    await store.save(thread)
    ids = [turn["id"] for turn in loads(_file(store, "sorted").read_bytes())["turns"]]
    tied = sorted([first.id, "same-time"])
    assert ids == ["unstamped", "zz-early", *tied, thread.current_tip]


async def test_saving_an_unchanged_thread_writes_the_same_bytes(store: JSONStore) -> None:
    thread = await store.create()
    thread.append(Role.USER, Text("a"))
    thread.append(Role.ASSISTANT, Text("b"))
    await store.save(thread)
    before = _file(store, thread.id).read_bytes()
    await store.save(await store.get(thread.id))
    assert _file(store, thread.id).read_bytes() == before


async def test_go_written_file_loads(store: JSONStore) -> None:
    _file(store, "go-thread").write_text(GO_WRITTEN)
    thread = await store.get("go-thread")
    assert thread.current_tip == "a1"
    assert thread.meta().all() == {"slack_thread_id": "1712.0001"}
    assert _texts(thread) == ["hi there"]  # a1 is a stop turn: the walk ends there
    assert thread.get_turn("a1") == Turn(
        "a1",
        Role.ASSISTANT,
        [Text("hi there")],
        parent_id="u1",
        timestamp=datetime(2024, 1, 1, 0, 0, 1, 123456, tzinfo=UTC),
        control=TraversalControl.STOP,
    )


async def test_null_turns_load_as_an_empty_thread(store: JSONStore) -> None:
    _file(store, "no-turns").write_text('{"id":"no-turns","turns":null}')
    assert len(await store.get("no-turns")) == 0


async def test_legacy_file_without_metadata_loads_with_empty_metadata(store: JSONStore) -> None:
    _file(store, "legacy-thread").write_text('{"id":"legacy-thread","turns":[]}')
    assert (await store.get("legacy-thread")).meta().all() == {}


async def test_corrupt_file_makes_get_raise_thread_corrupt_naming_file_and_cause(
    store: JSONStore,
) -> None:
    _file(store, "broken").write_text('{"id": "broken", "turns": [')
    with pytest.raises(ThreadCorrupt) as caught:
        await store.get("broken")
    message = str(caught.value)
    assert str(_file(store, "broken")) in message
    assert "invalid JSON" in message
    assert isinstance(caught.value, StoreError)


async def test_file_holding_another_thread_is_corrupt(store: JSONStore) -> None:
    _file(store, "copy").write_text('{"id":"original","turns":[]}')
    with pytest.raises(ThreadCorrupt, match="original"):
        await store.get("copy")


async def test_list_skips_a_corrupt_file(store: JSONStore) -> None:
    good = await store.create("good")
    _file(store, "broken").write_text("not json")
    assert [thread.id for thread in await store.list()] == [good.id]


async def test_get_by_skips_a_corrupt_file(store: JSONStore) -> None:
    _file(store, "aaa-broken").write_text("not json")
    good = await store.create("zzz-good", metadata={"k": "v"})
    assert (await store.get_by("k", "v")).id == good.id


async def test_foreign_files_in_the_directory_are_ignored(store: JSONStore) -> None:
    await store.create("real")
    (store.directory / "notes.txt").write_text("x")
    (store.directory / "bad name.json").write_text('{"id":"bad name","turns":[]}')
    assert await store.list_ids() == ["real"]


async def test_traversal_ids_never_reach_the_file_system(tmp_path: Path) -> None:
    outside = tmp_path / "secret.json"
    outside.write_text('{"id":"secret","turns":[]}')
    store = JSONStore(tmp_path / "threads")
    with pytest.raises(InvalidThreadId):
        await store.get("../secret")
    with pytest.raises(InvalidThreadId):
        await store.delete("../secret")
    with pytest.raises(InvalidThreadId):
        await store.save(Thread("../secret"))
    assert outside.read_text() == '{"id":"secret","turns":[]}'


async def test_delete_of_a_thread_never_loaded_returns_true(tmp_path: Path) -> None:
    writer = JSONStore(tmp_path)
    thread = await writer.create()
    fresh = JSONStore(tmp_path)
    assert await fresh.delete(thread.id) is True
    assert not _file(fresh, thread.id).exists()


async def test_concurrent_saves_leave_no_temporary_files(store: JSONStore) -> None:
    thread = await store.create("busy")
    copies = [await store.get("busy") for _ in range(20)]
    for n, copy in enumerate(copies):
        copy.append(Role.USER, Text(f"copy {n}"))
    results = await asyncio.gather(*(store.save(c) for c in copies), return_exceptions=True)
    assert sum(result is None for result in results) == 1  # the others were stale
    assert all(isinstance(result, StaleThread) for result in results if result is not None)
    names = sorted(path.name for path in store.directory.iterdir())
    assert names == [".ore-json.lock", f"{thread.id}.json"]
    assert len(await store.get("busy")) == 1


async def test_refused_create_leaves_the_file_and_no_temporary_file(store: JSONStore) -> None:
    thread = await store.create("taken", metadata={"k": "v"})
    with pytest.raises(ThreadExists):
        await store.create("taken")
    assert sorted(path.name for path in store.directory.iterdir()) == ["taken.json"]
    assert (await store.get(thread.id)).meta().all() == {"k": "v"}


async def test_another_instance_sees_a_save_at_once(tmp_path: Path) -> None:
    first = JSONStore(tmp_path)
    second = JSONStore(tmp_path)
    thread = await first.create()
    await second.get(thread.id)
    thread.append(Role.USER, Text("new"))
    await first.save(thread)
    assert _texts(await second.get(thread.id)) == ["new"]


async def test_get_by_notices_metadata_changed_by_another_instance(tmp_path: Path) -> None:
    first = JSONStore(tmp_path)
    second = JSONStore(tmp_path)
    thread = await first.create(metadata={"slack.channel": "C1"})
    assert (await first.get_by("slack.channel", "C1")).id == thread.id
    changed = await second.get(thread.id)
    changed.meta().set("slack.channel", "C2")
    await second.save(changed)
    assert (await first.get_by("slack.channel", "C2")).id == thread.id
