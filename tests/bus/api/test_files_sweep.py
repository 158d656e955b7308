"""`files.sweep`: the stored files no thread refers to are removed once old enough,
and nothing a stored thread carries ever is (issue 39, retention and removal)."""

from __future__ import annotations

import asyncio
import json
import socket
from pathlib import Path

import pytest
from nats.aio.client import Client

from ore_core.artifacts.attachment import Attachment
from ore_core.bus.server.streams import BusConfig
from ore_core.conduit.control import ControlClient
from ore_core.errors import ApiError
from ore_core.files.store import FileStore
from ore_core.session.stores.json_store import JSONStore
from ore_core.session.stores.memory import MemoryStore
from ore_core.subjects import Subjects
from tests.bus.conftest import CoreFactory
from tests.bus.raw import eventually, publish, user_message
from tests.ore_process import ore_at as ore


def files_of(nc: Client) -> FileStore:
    return FileStore(nc.jetstream(), Subjects().files_bucket)


async def send_with(nc: Client, thread_id: str, msg_id: str, *files: Attachment) -> None:
    message = {
        **user_message(f"see {msg_id}", msg_id),
        "attachments": [{"kind": "attachment", **file.to_dict()} for file in files],
    }
    await publish(nc, thread_id, message)


async def stored_turns(store: MemoryStore, thread_id: str, count: int) -> None:
    async def enough() -> bool:
        try:
            return len((await store.get(thread_id)).all_turns()) >= count
        except LookupError:
            return False

    await eventually(enough)


async def test_only_files_no_thread_carries_are_removed_and_a_deleted_thread_frees_its_own(
    start_core: CoreFactory, ore_nats_client: Client, store: MemoryStore
) -> None:
    await start_core()
    files, admin = files_of(ore_nats_client), ControlClient(ore_nats_client)
    kept = await files.upload(b"%PDF-1.7 the report" * 1000, "q3.pdf")
    shared = await files.upload(b"\x89PNG a screenshot" * 100, "shot.png")
    never_sent = await files.upload(b"a draft nobody sent", "draft.txt")
    await send_with(ore_nats_client, "t-one", "m-1", kept, shared)
    await send_with(ore_nats_client, "t-two", "m-2", shared)
    await stored_turns(store, "t-one", 2)
    await stored_turns(store, "t-two", 2)

    first = await admin.call("files.sweep", {"older_than": 0})
    assert first == {"referenced": 2, "young": 0, "removed": 1, "freed": never_sent.size}
    assert {file.sha256 for file in await files.stored_files()} == {kept.sha256, shared.sha256}

    assert await admin.delete_thread("t-one")
    second = await admin.call("files.sweep", {"older_than": 0})
    assert second == {"referenced": 1, "young": 0, "removed": 1, "freed": kept.size}
    assert await files.fetch(shared) == b"\x89PNG a screenshot" * 100  # t-two still shows it

    assert await admin.delete_thread("t-two")
    third = await admin.call("files.sweep", {"older_than": 0})
    assert (third["removed"], await files.stored_files()) == (1, [])


async def test_an_unreferenced_file_within_the_retention_is_kept(
    start_core: CoreFactory, ore_nats_client: Client
) -> None:
    # The retention is what keeps a file uploaded for a message that is not stored yet.
    await start_core()
    files = files_of(ore_nats_client)
    upload = await files.upload(b"uploaded, its message on the way", "note.txt")
    swept = await ControlClient(ore_nats_client).call("files.sweep", {})
    assert swept == {"referenced": 0, "young": 1, "removed": 0, "freed": 0}
    assert await files.fetch(upload) == b"uploaded, its message on the way"


async def test_a_negative_age_is_refused_and_removes_nothing(
    start_core: CoreFactory, ore_nats_client: Client
) -> None:
    await start_core()
    files = files_of(ore_nats_client)
    await files.upload(b"kept", "kept.txt")
    with pytest.raises(ApiError) as refused:
        await ControlClient(ore_nats_client).call("files.sweep", {"older_than": -1})
    assert refused.value.status == 400
    assert len(await files.stored_files()) == 1


async def test_ore_files_sweep_prints_what_it_removed(
    start_core: CoreFactory, ore_nats_client: Client, ore_nats_url: str, tmp_path: Path
) -> None:
    await start_core()
    await files_of(ore_nats_client).upload(b"x" * 2000, "orphan.txt")
    status, out, err = await ore(ore_nats_url, tmp_path, "files", "sweep", "--older-than", "0")
    assert (status, err) == (0, "")
    assert out == (
        "removed 1 files (2.0 kB); kept 0 that threads refer to and 0 stored too recently "
        "to remove\n"
    )
    status, out, _ = await ore(ore_nats_url, tmp_path, "files", "sweep", "--json")
    assert (status, json.loads(out)) == (0, {"referenced": 0, "young": 0, "removed": 0, "freed": 0})


async def test_ore_files_sweep_without_a_core_is_one_error_line(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        url = f"nats://127.0.0.1:{probe.getsockname()[1]}"
    status, _, err = await ore(url, tmp_path, "files", "sweep")
    assert status == 1
    assert len(err.splitlines()) == 1
    assert err.startswith("Error: ore files: cannot connect")


async def test_a_thread_the_store_cannot_read_stops_the_sweep_before_it_removes_anything(
    start_core: CoreFactory, ore_nats_client: Client, tmp_path: Path
) -> None:
    # The damaged thread might carry any file: removing none is the only safe answer.
    store = JSONStore(tmp_path / "threads")
    await start_core(store=store)
    files = files_of(ore_nats_client)
    await files.upload(b"carried by the damaged thread, perhaps", "maybe.txt")
    await store.create("broken")
    (store.directory / "broken.json").write_text('{"id": "broken", "turns": [')
    with pytest.raises(ApiError) as refused:
        await ControlClient(ore_nats_client).call("files.sweep", {"older_than": 0})
    assert refused.value.status == 409
    assert "thread broken cannot be read" in refused.value.message
    assert len(await files.stored_files()) == 1


async def test_a_5_mb_file_sent_100_times_is_stored_once_and_freed_with_its_threads(
    start_core: CoreFactory, ore_nats_client: Client, store: MemoryStore
) -> None:
    await start_core()
    files, admin = files_of(ore_nats_client), ControlClient(ore_nats_client)
    empty = await files.stored_bytes()
    report = bytes(range(256)) * (5 * 1024 * 4)  # 5 MiB
    threads = [f"t-pdf-{n}" for n in range(10)]
    for n in range(100):
        sent = await files.upload(report, "report.pdf")
        await send_with(ore_nats_client, threads[n % 10], f"m-{n}", sent)
    for thread_id in threads:
        await stored_turns(store, thread_id, 20)  # ten messages, ten answers
    stored = await files.stored_bytes() - empty
    assert len(report) <= stored < len(report) + 64 * 1024  # the bytes once, and a header

    for thread_id in threads:
        assert await admin.delete_thread(thread_id)
    swept = await admin.call("files.sweep", {"older_than": 0})
    assert (swept["removed"], swept["freed"]) == (1, len(report))
    assert await files.stored_bytes() - empty < 4 * 1024  # the removed file's description


async def test_ore_serve_sweeps_by_itself_keeping_what_a_thread_carries(
    start_core: CoreFactory, ore_nats_client: Client, store: MemoryStore
) -> None:
    first = await start_core(config=BusConfig(partitions=2, files_sweep_every=0))
    files = files_of(ore_nats_client)
    kept = await files.upload(b"%PDF-1.7 carried" * 100, "kept.pdf")
    dropped = await files.upload(b"never sent anywhere", "dropped.txt")
    await send_with(ore_nats_client, "t-kept", "m-1", kept)
    await stored_turns(store, "t-kept", 2)
    await first.stop()
    await start_core(config=BusConfig(partitions=2, files_retention=0, files_sweep_every=0.05))

    async def swept() -> bool:
        return {file.sha256 for file in await files.stored_files()} == {kept.sha256}

    await eventually(swept)  # no `files.sweep` call: the worker's own sweep removed it
    assert await files.fetch(kept) == b"%PDF-1.7 carried" * 100
    assert dropped.sha256 not in {file.sha256 for file in await files.stored_files()}


async def test_a_sweep_every_of_zero_never_sweeps(
    start_core: CoreFactory, ore_nats_client: Client
) -> None:
    await start_core(config=BusConfig(partitions=2, files_retention=0, files_sweep_every=0))
    files = files_of(ore_nats_client)
    dropped = await files.upload(b"never sent anywhere", "dropped.txt")
    assert "ore-files-sweep" not in {task.get_name() for task in asyncio.all_tasks()}
    assert [file.sha256 for file in await files.stored_files()] == [dropped.sha256]
