"""Fixtures for the core side of the bus: a real nats-server, Manager, store and CoreService.

Clients in these tests speak only protocol.md, through a raw nats-py connection: the
helpers that spell and read it are in `tests/bus/raw.py`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import nats
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg

from ore_core import Manager, Store, TurnProcessor
from ore_core.bus.server.streams import BusConfig
from ore_core.bus.service import CoreService
from ore_core.session.echo import EchoProcessor
from ore_core.session.stores.memory import MemoryStore
from tests.bus.raw import PARTITIONS, TIMEOUT, unpack


@dataclass
class Outbox:
    """Everything received on `ore.out.*.*`, per thread, in arrival order."""

    messages: dict[str, list[Msg]] = field(default_factory=dict)
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    async def receive(self, msg: Msg) -> None:
        self.messages.setdefault(msg.subject.rpartition(".")[2], []).append(msg)
        self._changed.set()

    def events(self, thread_id: str) -> list[dict[str, Any]]:
        """The decoded events of `thread_id` so far."""
        return [event for m in self.messages.get(thread_id, []) for event in unpack(m.data)]

    def stored(self, thread_id: str) -> list[Msg]:
        """The republished (stored) messages of `thread_id`: they carry a sequence."""
        return [m for m in self.messages.get(thread_id, []) if "Nats-Sequence" in (m.headers or {})]

    def count_done(self, thread_id: str) -> int:
        return sum(
            1 for e in self.events(thread_id) if e["kind"] == "lifecycle" and e["phase"] == "done"
        )

    async def until(self, condition: Callable[[], bool]) -> None:
        """Wait until `condition()` holds, re-checking whenever a message arrives."""
        async with asyncio.timeout(TIMEOUT):
            while True:
                self._changed.clear()
                if condition():
                    return
                await self._changed.wait()

    async def done(self, thread_id: str, count: int = 1) -> list[dict[str, Any]]:
        """Wait for `count` `lifecycle: done` events of the thread; returns its events."""
        await self.until(lambda: self.count_done(thread_id) >= count)
        return self.events(thread_id)


@pytest.fixture
async def outbox(ore_nats_client: Client) -> Outbox:
    """A subscriber of `ore.out.*.*` on the raw test connection."""
    box = Outbox()
    await ore_nats_client.subscribe("ore.out.*.*", cb=box.receive)
    await ore_nats_client.flush()
    return box


@pytest.fixture
def store() -> MemoryStore:
    """The store of the core under test."""
    return MemoryStore()


CoreFactory = Callable[..., Awaitable[CoreService]]


@pytest.fixture
async def start_core(ore_nats_url: str, store: MemoryStore) -> AsyncIterator[CoreFactory]:
    """Start CoreServices (`await start_core(processor, **options)`); stopped after the test."""
    services: list[CoreService] = []

    async def start(
        processor: TurnProcessor | None = None,
        *,
        store: Store = store,
        config: BusConfig | None = None,
        **options: Any,
    ) -> CoreService:
        manager = Manager(store, processor or EchoProcessor())
        service = CoreService(
            manager,
            servers=[ore_nats_url],
            config=config or BusConfig(partitions=PARTITIONS),
            reconnect_wait=0.05,
            **options,
        )
        await service.start()
        services.append(service)
        return service

    yield start
    for service in services:
        await service.stop(grace=0)


@pytest.fixture
async def core(start_core: CoreFactory) -> CoreService:
    """A running core with the echo processor."""
    return await start_core()


@pytest.fixture
async def raw_client(ore_nats_url: str) -> AsyncIterator[Client]:
    """A second raw connection (a conduit of its own)."""
    client = await nats.connect(ore_nats_url, reconnect_time_wait=0.05, max_reconnect_attempts=-1)
    try:
        yield client
    finally:
        await client.close()
