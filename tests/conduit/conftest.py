"""Fixtures for the bus client tests: Manager, ControlAPI, streams and a conduit client.

The nats-server fixtures (`ore_nats_server`, `ore_nats_url`, `ore_nats_client`) come from
`ore_core.testing.nats`, loaded by tests/conftest.py.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from nats.aio.client import Client

from ore_core import ConduitClient, Manager
from ore_core.bus.api.control_api import ControlAPI
from ore_core.bus.server.streams import BusConfig, ensure_streams
from ore_core.session.echo import EchoProcessor
from ore_core.session.stores.memory import MemoryStore
from ore_core.subjects import Subjects

VERSION = "0.1.0"


@pytest.fixture
def subjects() -> Subjects:
    """The default `ore` prefix."""
    return Subjects()


@pytest.fixture
async def streams(ore_nats_client: Client, subjects: Subjects) -> None:
    """ORE_IN, ORE_EVENTS and ORE_DLQ as the core creates them."""
    await ensure_streams(ore_nats_client.jetstream(), subjects, BusConfig(partitions=2))


@pytest.fixture
async def manager() -> AsyncIterator[Manager]:
    """A Manager over an in-memory store that echoes every message."""
    async with Manager(MemoryStore(), EchoProcessor()) as manager:
        yield manager


@pytest.fixture
async def control_api(
    ore_nats_client: Client, manager: Manager, subjects: Subjects
) -> AsyncIterator[ControlAPI]:
    """The control API of `manager`, serving on `ore_nats_client`."""
    api = ControlAPI(
        ore_nats_client, manager, subjects, version=VERSION, instance_metadata={"worker": "w1"}
    )
    async with api:
        yield api


@pytest.fixture
async def client(ore_nats_url: str) -> AsyncIterator[ConduitClient]:
    """A conduit named `test` with short timeouts, so failures show quickly."""
    client = await ConduitClient.connect(
        ore_nats_url, name="test", request_timeout=2.0, send_deadline=5.0
    )
    async with client:
        yield client
