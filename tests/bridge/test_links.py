"""LinkStore over a real KV bucket: create-only endpoints, CAS link sets, orphans repaired."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from nats.aio.client import Client

from ore_core.bridge.cache import LinkCache
from ore_core.bridge.links import LinkConflict, LinkNotFound, LinkSettings, LinkStore
from ore_core.bridge.records import EndpointRecord, endpoint_key
from ore_core.endpoint import Endpoint
from tests.bus import raw

SLACK = Endpoint("slack", "slack.thread", "C1/1")
WEB = Endpoint("web", "web.thread", "w1")
CONCURRENT = 16


@pytest.fixture
async def store(ore_nats_client: Client) -> AsyncIterator[LinkStore]:
    js = ore_nats_client.jetstream()
    kv = await js.create_key_value(bucket="ORE_LINKS")
    yield LinkStore(kv)
    await js.delete_key_value("ORE_LINKS")


async def test_an_added_endpoint_finds_its_thread(store: LinkStore) -> None:
    links = await store.add("t1", "stdin", SLACK, "inout")
    assert links.home == "stdin"
    assert [e.endpoint for e in links.endpoints] == [SLACK]
    assert await store.thread_of(SLACK) == "t1"


async def test_of_concurrent_adds_of_one_endpoint_exactly_one_wins(store: LinkStore) -> None:
    results = await asyncio.gather(
        *(store.add(f"t{n}", "stdin", SLACK, "inout") for n in range(CONCURRENT)),
        return_exceptions=True,
    )
    won = [r for r in results if not isinstance(r, BaseException)]
    lost = [r for r in results if isinstance(r, LinkConflict)]
    assert (len(won), len(lost)) == (1, CONCURRENT - 1)
    holder = await store.thread_of(SLACK)
    assert holder is not None
    assert list(await store.threads()) == [holder]


async def test_concurrent_adds_of_different_endpoints_to_one_thread_all_land(
    store: LinkStore,
) -> None:
    endpoints = [Endpoint(f"ns{n}", "id", "t1") for n in range(CONCURRENT)]
    await asyncio.gather(*(store.add("t1", "stdin", e, "inout") for e in endpoints))
    found = await store.link_set("t1")
    assert found is not None
    assert {e.endpoint for e in found[0].endpoints} == set(endpoints)


async def test_an_endpoint_held_by_a_gateway_names_it(store: LinkStore) -> None:
    await store.add("t1", "stdin", SLACK, "inout", LinkSettings(gateway="team"))
    with pytest.raises(LinkConflict, match=r"linked to thread t1 by gateway 'team'"):
        await store.add("t2", "stdin", SLACK, "inout")


async def test_linking_an_endpoint_to_its_thread_twice_is_refused(store: LinkStore) -> None:
    await store.add("t1", "stdin", SLACK, "inout")
    with pytest.raises(LinkConflict, match="already"):
        await store.add("t1", "stdin", SLACK, "inout")


async def test_applying_the_same_link_again_with_exist_ok_changes_nothing(
    store: LinkStore,
) -> None:
    first = await store.add("t1", "stdin", SLACK, "inout", LinkSettings(gateway="g"))
    before = (await store.kv.status()).values
    again = await store.add("t1", "stdin", SLACK, "inout", LinkSettings(gateway="g"), exist_ok=True)
    assert again == first
    assert (await store.kv.status()).values == before  # nothing written


async def test_a_second_endpoint_of_one_namespace_is_refused_and_leaves_no_record(
    store: LinkStore,
) -> None:
    await store.add("t1", "stdin", SLACK, "inout")
    other = Endpoint("slack", "slack.thread", "C2/2")
    with pytest.raises(LinkConflict, match="one endpoint per conduit namespace"):
        await store.add("t1", "stdin", other, "inout")
    assert await store.thread_of(other) is None
    await store.add("t2", "stdin", other, "inout")  # free for another thread


async def test_a_removed_endpoint_can_be_linked_elsewhere(store: LinkStore) -> None:
    await store.add("t1", "stdin", SLACK, "inout")
    assert await store.remove(SLACK) == "t1"
    assert await store.thread_of(SLACK) is None
    assert await store.link_set("t1") is None
    await store.add("t2", "stdin", SLACK, "inout")
    assert await store.thread_of(SLACK) == "t2"


async def test_removing_an_unlinked_endpoint_is_not_found(store: LinkStore) -> None:
    with pytest.raises(LinkNotFound):
        await store.remove(SLACK)


async def test_an_orphan_endpoint_record_is_ignored_and_taken_over(store: LinkStore) -> None:
    # A crash after creating `ep` and before the CAS of `th` leaves this behind.
    orphan = EndpointRecord(**SLACK.as_dict(), direction="inout", thread="t-crashed")
    await store.kv.create(endpoint_key(SLACK), orphan.model_dump_json().encode())
    assert await store.thread_of(SLACK) is None
    await store.add("t1", "stdin", SLACK, "inout")
    assert await store.thread_of(SLACK) == "t1"


async def test_the_cache_hears_of_links_added_and_removed(store: LinkStore) -> None:
    cache = LinkCache(store)
    await cache.start()
    try:
        await store.add("t1", "stdin", SLACK, "out")
        await store.add("t1", "stdin", WEB, "in")
        await raw.wait_for(lambda: cache.copies("t1") == ("slack",))
        assert await cache.admits("web", "t1")
        assert not await cache.admits("slack", "t1")
        assert await cache.shows("slack", "t1") == "stdin"
        await store.remove(SLACK)
        await store.remove(WEB)
        await raw.wait_for(lambda: cache.cached("t1") is None)
    finally:
        await cache.stop()


async def test_a_link_the_cache_has_not_heard_of_is_admitted_from_the_kv(
    store: LinkStore,
) -> None:
    cache = LinkCache(store)
    await cache.start()
    await cache.stop()  # no watch: only the KV can tell
    await store.add("t1", "stdin", WEB, "inout")
    assert await cache.admits("web", "t1")
