"""Listing KV keys is exact: every live key, no deleted one, nothing left on the server.

nats-py's `kv.watch`/`kv.keys()` ended the listing at a marker that could come before
the entries on a loaded machine (a `get_by` right after `create` found nothing), and
left one consumer per listing on the server for five minutes.
"""

from __future__ import annotations

import asyncio
import uuid

import nats
from nats.aio.client import Client
from nats.js.api import KeyValueConfig

from ore_core.bus.cluster.kv_keys import live_keys
from ore_core.bus.store.jetstream_store import JetStreamStore

TIMEOUT = 30.0  # bounds a hang only
ROUNDS = 40
WIDTH = 16


async def test_every_lookup_right_after_create_finds_its_thread_under_concurrent_writes(
    ore_nats_url: str,
) -> None:
    connections = [await nats.connect(ore_nats_url) for _ in range(4)]
    try:
        stores = [JetStreamStore(nc) for nc in connections]
        writing = asyncio.Event()
        stop = asyncio.Event()

        async def write(store: JetStreamStore) -> int:
            """Load on the server: updates to other threads' metadata all the while."""
            thread = await store.create(metadata={"load": uuid.uuid4().hex})
            saves = 0
            while not stop.is_set():
                thread.meta().set("n", str(saves))
                await store.save(thread)
                saves += 1
                writing.set()
            return saves

        async def create_then_find(store: JetStreamStore) -> tuple[str, str]:
            value = uuid.uuid4().hex
            created = await store.create(metadata={"k": value})
            found = await store.get_by("k", value)
            return created.id, found.id

        writers = [asyncio.create_task(write(store)) for store in stores[:2]]
        try:
            await asyncio.wait_for(writing.wait(), TIMEOUT)
            pairs: list[tuple[str, str]] = []
            for _ in range(ROUNDS):
                pairs += await asyncio.gather(
                    *(create_then_find(stores[i % len(stores)]) for i in range(WIDTH))
                )
        finally:
            stop.set()
            saves = await asyncio.gather(*writers)

        assert all(saved > 0 for saved in saves)
        missed = [created for created, found in pairs if found != created]
        assert missed == []
        assert len(pairs) == ROUNDS * WIDTH
        listed = set(await stores[0].list_ids())
        assert {created for created, _ in pairs} <= listed
    finally:
        for nc in connections:
            await nc.close()


async def test_a_listing_leaves_no_consumer_on_the_server(ore_nats_client: Client) -> None:
    store = JetStreamStore(ore_nats_client)
    await store.create("one", {"k": "v"})

    for _ in range(50):
        assert (await store.get_by("k", "v")).id == "one"
        assert await store.list_ids() == ["one"]

    info = await ore_nats_client.jetstream().stream_info("KV_ORE_THREADS")
    assert info.state.consumer_count == 0


async def test_deleted_and_purged_keys_are_not_listed_and_updated_ones_once(
    ore_nats_client: Client,
) -> None:
    kv = await ore_nats_client.jetstream().create_key_value(
        KeyValueConfig(bucket="LISTED", history=5)
    )
    for key in ("a.live", "a.updated", "a.deleted", "a.purged", "b.other"):
        await kv.put(key, b"1")
    await kv.put("a.updated", b"2")
    await kv.delete("a.deleted")
    await kv.purge("a.purged")

    keys = await live_keys(ore_nats_client, "LISTED", "a.*", TIMEOUT)

    assert sorted(keys) == ["a.live", "a.updated"]


async def test_more_keys_than_one_pull_batch_are_all_listed(ore_nats_client: Client) -> None:
    kv = await ore_nats_client.jetstream().create_key_value(KeyValueConfig(bucket="MANY"))
    expected = {f"k.{n:04d}" for n in range(1300)}  # more than two pulls of 512
    await asyncio.gather(*(kv.put(key, b"") for key in expected))

    keys = await live_keys(ore_nats_client, "MANY", ">", TIMEOUT)

    assert len(keys) == len(expected)
    assert set(keys) == expected


async def test_no_match_is_an_empty_listing(ore_nats_client: Client) -> None:
    await ore_nats_client.jetstream().create_key_value(KeyValueConfig(bucket="EMPTY"))

    assert await live_keys(ore_nats_client, "EMPTY", "nothing.*", TIMEOUT) == []
