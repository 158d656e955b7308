"""Fixtures for the core side of the bus: a real nats-server, Manager, store and CoreService.

Clients in these tests speak only protocol.md, through a raw nats-py connection.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import nats
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import ConsumerInfo

from ore_core import Manager, Store, TurnProcessor
from ore_core.bus.server.streams import BusConfig, consumer_name
from ore_core.bus.service import CoreService
from ore_core.session.echo import EchoProcessor
from ore_core.session.stores.memory import MemoryStore
from ore_core.subjects import Subjects, partition_of

PARTITIONS = 4
TIMEOUT = 30.0
POLL = 0.02
SUBJECTS = Subjects()


def user_message(content: str, msg_id: str, provenance: str = "raw") -> dict[str, Any]:
    """An ingress user_message as protocol.md spells it."""
    return {
        "kind": "user_message",
        "id": msg_id,
        "content": content,
        "context": {"provenance": provenance},
    }


async def publish(
    nc: Client,
    thread_id: str,
    payload: dict[str, Any] | bytes,
    *,
    msg_id: str | None = None,
    headers: dict[str, str] | None = None,
    namespace: str = "raw",
) -> Any:
    """Publish to `ore.in.NS.T` (namespace `raw`) with an ack; `Nats-Msg-Id` = the event id."""
    data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    all_headers = dict(headers or {})
    if msg_id is None and isinstance(payload, dict):
        msg_id = str(payload.get("id", ""))
    if msg_id:
        all_headers["Nats-Msg-Id"] = msg_id
    # The timeout only bounds a hang: a loaded machine (or a cluster electing a leader)
    # may take longer than nats-py's 5 s default to acknowledge.
    return await nc.jetstream(timeout=30).publish(
        f"ore.in.{namespace}.{thread_id}", data, headers=all_headers or None
    )


async def eventually(check: Callable[[], Awaitable[bool]]) -> None:
    """Wait until the async `check()` holds; fail after TIMEOUT.

    For state with no event to wait on (the server's consumer state, the connection
    state of a service after a restart), it checks every POLL seconds.
    """
    async with asyncio.timeout(TIMEOUT):
        while True:
            if await check():
                return
            await asyncio.sleep(POLL)


async def wait_for(condition: Callable[[], bool]) -> None:
    """`eventually` for a plain condition."""

    async def check() -> bool:
        return condition()

    await eventually(check)


async def all_acknowledged(nc: Client) -> bool:
    """True when no partition consumer has a message pending or unacknowledged."""
    js = nc.jetstream()
    for partition in range(PARTITIONS):
        info = await js.consumer_info("ORE_IN", consumer_name(partition))
        if info.num_ack_pending or info.num_pending:
            return False
    return True


def unpack(data: bytes) -> list[dict[str, Any]]:
    """The events of one message: a batch's events in order, or the one event."""
    message = json.loads(data)
    return list(message["events"]) if message["kind"] == "batch" else [message]


async def stored_messages(nc: Client, thread_id: str) -> list[list[dict[str, Any]]]:
    """The messages stored for `thread_id` in ORE_EVENTS (each a batch), in sequence order."""
    js = nc.jetstream()
    state = (await js.stream_info("ORE_EVENTS")).state
    messages: list[list[dict[str, Any]]] = []
    if not state.last_seq or not state.messages:
        return messages
    for seq in range(state.first_seq, state.last_seq + 1):
        msg = await js.get_msg("ORE_EVENTS", seq)
        if msg.subject == f"ore.ev.raw.{thread_id}":
            assert msg.headers is not None
            assert msg.headers["Ore-Kind"] == json.loads(msg.data or b"{}")["kind"] == "batch"
            messages.append(unpack(msg.data or b""))
    return messages


async def stored_events(nc: Client, thread_id: str) -> list[dict[str, Any]]:
    """The events stored for `thread_id` in ORE_EVENTS, in sequence order."""
    return [event for batch in await stored_messages(nc, thread_id) for event in batch]


async def consumer_of(nc: Client, thread_id: str) -> ConsumerInfo:
    """The state of the partition consumer that owns `thread_id`."""
    info: ConsumerInfo = await nc.jetstream().consumer_info(
        "ORE_IN", consumer_name(partition_of(thread_id, PARTITIONS))
    )
    return info


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
