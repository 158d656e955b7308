"""The JetStream store passes the store conformance suite against a real nats-server."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import nats
import pytest
from nats.aio.client import Client

from ore_core import ArtifactError, Role, StaleThread, Text
from ore_core.bus.server.embedded import EmbeddedNatsServer
from ore_core.bus.store.jetstream_store import JetStreamStore
from ore_core.session.protocols import Store
from ore_core.subjects import Subjects
from ore_core.testing.store_conformance import StoreConformance


class TestJetStreamStore(StoreConformance):
    """Each store gets its own connection; a path names its own subject prefix."""

    @pytest.fixture(autouse=True)
    async def _server(self, ore_nats_server: EmbeddedNatsServer) -> AsyncIterator[None]:
        self._url = ore_nats_server.url
        self._connections: list[Client] = []
        yield
        for nc in self._connections:
            await nc.close()

    async def open_store(self, path: Path) -> Store:
        nc = await nats.connect(self._url)
        self._connections.append(nc)
        store = JetStreamStore(nc, subjects=Subjects("t" + path.parent.name[-20:].replace(".", "")))
        return store


async def test_a_stale_append_is_refused_by_the_server(ore_nats_client: Client) -> None:
    store = JetStreamStore(ore_nats_client)
    thread = await store.create("fenced")
    copy = await store.get("fenced")
    thread.append(Role.USER, Text("first"))
    await store.save(thread)
    copy.append(Role.USER, Text("stale"))
    with pytest.raises(StaleThread, match="fenced"):
        await store.save(copy)
    info = await ore_nats_client.jetstream().stream_info("ORE_JOURNAL")
    assert info.state.messages == 2  # the create and the first save; nothing else


async def test_workers_on_separate_connections_share_one_lookup_or_create(
    ore_nats_url: str,
) -> None:
    connections = [await nats.connect(ore_nats_url) for _ in range(3)]
    try:
        stores = [JetStreamStore(nc) for nc in connections]
        results = await asyncio.gather(
            *(store.get_or_create_by("slack.thread", "T1") for store in stores for _ in range(5))
        )
        assert len({thread.id for thread, _ in results}) == 1
        assert sum(created for _, created in results) == 1
        assert len(await stores[0].list_ids()) == 1
    finally:
        for nc in connections:
            await nc.close()


async def test_a_save_larger_than_a_nats_message_fails_the_turn_not_the_store(
    ore_nats_client: Client,
) -> None:
    store = JetStreamStore(ore_nats_client)
    thread = await store.create("big")
    thread.append(Role.ASSISTANT, Text("x" * (ore_nats_client.max_payload + 1)))
    with pytest.raises(ArtifactError, match="max_payload"):
        await store.save(thread)
    assert len(await store.get("big")) == 0
