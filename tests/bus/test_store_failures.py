"""Store failures over the bus: retried, never acknowledged away; stale writers; corrupt threads.

Real nats-server, real CoreService, real stores. A store that cannot write is either a
`FaultyStore` (a real store with injected write errors) or, where the test may mount
file systems (root on Linux), a real full or read-only tmpfs.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import structlog.testing
from nats.aio.client import Client

from ore_core import Role, Store
from ore_core.bus.server.streams import BusConfig, consumer_name
from ore_core.bus.service import CoreService
from ore_core.bus.store.jetstream_store import JetStreamStore
from ore_core.errors import ThreadCorrupt
from ore_core.session.store_health import DELAYED_NOTICE
from ore_core.session.stores import JournalStore, JSONStore, SQLiteStore
from ore_core.session.stores.memory import MemoryStore
from ore_core.subjects import NAMESPACE_KEY
from ore_core.testing.faulty_store import FaultyStore
from tests.bus import raw
from tests.bus.conftest import CoreFactory, Outbox
from tests.disk import fill_disk

FAST_RETRY = BusConfig(partitions=raw.PARTITIONS, retry_delay=0.05, retry_delay_max=0.2)


async def _readyz(service: CoreService) -> int:
    """The status code of the worker's GET /readyz."""
    reader, writer = await asyncio.open_connection("127.0.0.1", service.health_port)
    writer.write(b"GET /readyz HTTP/1.1\r\nHost: ore\r\n\r\n")
    await writer.drain()
    status = int((await reader.readline()).split()[1])
    writer.close()
    await writer.wait_closed()
    return status


def texts(outbox: Outbox, thread_id: str) -> list[str]:
    return [e["content"] for e in outbox.events(thread_id) if e["kind"] == "text"]


def notices(outbox: Outbox, thread_id: str) -> list[dict[str, object]]:
    return [e for e in outbox.events(thread_id) if e["kind"] == "notice"]


async def test_failed_saves_are_retried_until_the_store_recovers_and_the_sender_told_once(
    start_core: CoreFactory, ore_nats_client: Client, outbox: Outbox
) -> None:
    store = FaultyStore(MemoryStore())
    existing = await store.create("old", {NAMESPACE_KEY: "raw"})  # publish() sends as `raw`
    service = await start_core(
        store=store, config=FAST_RETRY, store_probe_interval=0.05, health_port=0
    )
    await raw.wait_for(lambda: service.ready)
    assert await _readyz(service) == 200
    store.failing = True
    for n, word in enumerate(["one", "two", "three"]):
        await raw.publish(ore_nats_client, existing.id, raw.user_message(word, f"old-{n}"))
        await raw.publish(ore_nats_client, "new", raw.user_message(word, f"new-{n}"))
    await outbox.until(lambda: bool(notices(outbox, "old")) and bool(notices(outbox, "new")))
    await raw.wait_for(lambda: store.failures >= 12 and not service.ready)  # retried, not ready
    assert await _readyz(service) == 503
    assert outbox.count_done("old") == outbox.count_done("new") == 0
    store.failing = False
    await outbox.done("old", count=3)
    await outbox.done("new", count=3)
    await raw.wait_for(lambda: service.ready)
    assert await _readyz(service) == 200
    for thread_id in ("old", "new"):
        assert texts(outbox, thread_id) == ["one", "two", "three"]  # answered, in order
        assert [n["content"] for n in notices(outbox, thread_id)] == [DELAYED_NOTICE]
        assert str(notices(outbox, thread_id)[0]["severity"]).lower() == "warn"
        thread = await store.get(thread_id)
        assert [t.role for t in thread.all_turns()] == [Role.USER, Role.ASSISTANT] * 3
    await raw.eventually(lambda: raw.all_acknowledged(ore_nats_client))
    # Retried by the worker, not by redelivery: the server delivered each message once.
    js = ore_nats_client.jetstream()
    delivered = 0
    for partition in range(raw.PARTITIONS):
        info = await js.consumer_info("ORE_IN", consumer_name(partition))
        delivered += info.delivered.consumer_seq if info.delivered else 0
    assert delivered == 6


@pytest.fixture
async def broken_store(tmp_path: Path) -> AsyncIterator[JSONStore]:
    """A JSON store whose thread `broken` is a torn file (`threads/broken.json`)."""
    store = JSONStore(tmp_path / "threads")
    (tmp_path / "threads" / "broken.json").write_text('{"id": "broken", "turns": [{')
    yield store
    await store.close()


async def test_a_thread_that_cannot_be_decoded_goes_to_the_dlq_at_once(
    start_core: CoreFactory, ore_nats_client: Client, outbox: Outbox, broken_store: JSONStore
) -> None:
    await start_core(store=broken_store)
    dead = await ore_nats_client.jetstream().subscribe("ore.dlq.>", durable="check")
    await raw.publish(ore_nats_client, "broken", raw.user_message("hi", "m-1"))
    events = await outbox.done("broken")
    errors = [e for e in events if e["kind"] == "error"]
    assert [e["code"] for e in errors] == ["corrupt_thread"]
    assert "broken" in errors[0]["message"]
    record = await dead.next_msg(timeout=10)
    assert record.subject == "ore.dlq.corrupt_thread"
    assert json.loads(record.data)["thread_id"] == "broken"
    await raw.eventually(lambda: raw.all_acknowledged(ore_nats_client))


async def test_the_error_a_sender_gets_about_a_corrupt_thread_names_no_server_file(
    start_core: CoreFactory,
    ore_nats_client: Client,
    outbox: Outbox,
    broken_store: JSONStore,
    tmp_path: Path,
) -> None:
    await start_core(store=broken_store)
    with structlog.testing.capture_logs() as logs:
        await raw.publish(ore_nats_client, "broken", raw.user_message("hi", "m-1"))
        events = await outbox.done("broken")
    [error] = [e for e in events if e["kind"] == "error"]
    assert (error["code"], error["message"]) == (
        "corrupt_thread",
        ThreadCorrupt.public_message("broken"),
    )
    [logged] = [line for line in logs if line["event"] == "thread cannot be read"]
    assert str(tmp_path / "threads" / "broken.json") in logged["error"]


@pytest.mark.parametrize("kind", ["sqlite", "journal", "jetstream"])
async def test_two_workers_on_one_store_never_fork_a_thread(
    start_core: CoreFactory, ore_nats_client: Client, outbox: Outbox, tmp_path: Path, kind: str
) -> None:
    # Two workers pulling the same partitions (no ownership): every stale save is
    # refused, the message redelivered and handled on the reloaded thread.
    first: Store
    second: Store
    if kind == "sqlite":
        first, second = SQLiteStore(tmp_path / "ore.db"), SQLiteStore(tmp_path / "ore.db")
    elif kind == "journal":  # a thread's journal is locked by one worker: the other retries
        first = JournalStore(tmp_path / "journal", lock_timeout=0.05, max_open=4)
        second = JournalStore(tmp_path / "journal", lock_timeout=0.05, max_open=4)
    else:  # each worker's store shares that worker's NATS connection
        first, second = JetStreamStore(), JetStreamStore()
    try:
        await start_core(store=first, config=FAST_RETRY)
        await start_core(store=second, config=FAST_RETRY)
        threads = [f"t{n}" for n in range(12)]
        for n in range(4):
            for thread_id in threads:
                await raw.publish(
                    ore_nats_client, thread_id, raw.user_message(f"m{n}", f"{thread_id}-{n}")
                )
        for thread_id in threads:
            await outbox.done(thread_id, count=4)
        await raw.eventually(lambda: raw.all_acknowledged(ore_nats_client))
        for thread_id in threads:
            thread = await first.get(thread_id)
            path = thread.turns()
            assert len(path) == len(thread.all_turns()) == 8  # one line, no branch
            assert [t.role for t in path] == [Role.USER, Role.ASSISTANT] * 4
            assert sorted(t.event_id for t in path if t.role == Role.USER) == [
                f"{thread_id}-{n}" for n in range(4)
            ]
    finally:
        await first.close()
        await second.close()


# -- real file systems: a full disk and a read-only one -------------------------------------


@contextlib.contextmanager
def _tmpfs(path: Path, size: str) -> Iterator[Path]:
    path.mkdir()
    if not sys.platform.startswith("linux") or os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root on Linux")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
        capture_output=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def _remount(path: Path, mode: str) -> None:
    subprocess.run(["mount", "-o", f"remount,{mode}", str(path)], check=True)


@pytest.mark.parametrize("fault", ["full", "read-only"])
async def test_a_real_full_or_read_only_disk_delays_the_answer_and_loses_nothing(
    start_core: CoreFactory, ore_nats_client: Client, outbox: Outbox, tmp_path: Path, fault: str
) -> None:
    with _tmpfs(tmp_path / "disk", "2m") as disk:
        store = JSONStore(disk / "threads")
        try:
            service = await start_core(store=store, config=FAST_RETRY, store_probe_interval=0.05)
            await raw.publish(ore_nats_client, "t1", raw.user_message("before", "m-0"))
            await outbox.done("t1")
            filler = fill_disk(disk) if fault == "full" else None
            if fault == "read-only":
                _remount(disk, "ro")
            await raw.publish(ore_nats_client, "t1", raw.user_message("during", "m-1"))
            await raw.publish(ore_nats_client, "t1", raw.user_message("still", "m-2"))
            await outbox.until(lambda: bool(notices(outbox, "t1")))
            await raw.wait_for(lambda: not service.ready)
            assert outbox.count_done("t1") == 1
            if filler is not None:
                filler.unlink()
            else:
                _remount(disk, "rw")
            await outbox.done("t1", count=3)
            await raw.wait_for(lambda: service.ready)
            assert texts(outbox, "t1") == ["before", "during", "still"]
            assert len(notices(outbox, "t1")) == 1
            thread = await store.get("t1")
            assert [t.role for t in thread.all_turns()] == [Role.USER, Role.ASSISTANT] * 3
            await raw.eventually(lambda: raw.all_acknowledged(ore_nats_client))
        finally:
            await store.close()
