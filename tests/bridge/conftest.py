"""Fixtures for bridging's tests.

A linked thread is relayed by a real core: the core fixtures of the bus's tests (a real
nats-server, a CoreService, an outbox subscriber) serve here as they are, and `shared`
/ `linked` set up the thread of `tests/bridge/linked.py` once for every test that needs it;
`gateway` starts the three endpoints of `tests/bridge/gateway.py` on the test's `core`;
`alpha` and `beta` are ConduitClients of the two namespaces of a linked thread.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from nats.aio.client import Client

from ore_core.bus.server.embedded import EmbeddedNatsServer
from ore_core.bus.service import CoreService
from ore_core.conduit import ConduitClient
from tests.bridge.gateway import Gateway
from tests.bridge.linked import Linked, LinkedThread, answered_thread
from tests.bus.conftest import CoreFactory, core, outbox, raw_client, start_core, store

__all__ = [
    "alpha",
    "beta",
    "core",
    "gateway",
    "linked",
    "outbox",
    "raw_client",
    "shared",
    "start_core",
    "store",
]


@pytest.fixture
async def alpha(ore_nats_url: str) -> AsyncIterator[ConduitClient]:
    async with await ConduitClient.connect(ore_nats_url, name="alpha", request_timeout=5.0) as c:
        yield c


@pytest.fixture
async def beta(ore_nats_url: str) -> AsyncIterator[ConduitClient]:
    async with await ConduitClient.connect(ore_nats_url, name="beta", request_timeout=5.0) as c:
        yield c


@pytest.fixture
async def shared(start_core: CoreFactory, ore_nats_client: Client) -> LinkedThread:
    """A core, and THREAD made by alpha with one turn answered; not linked yet."""
    core = await start_core()
    return LinkedThread(core, ore_nats_client, await answered_thread(ore_nats_client))


@pytest.fixture
async def linked(shared: LinkedThread) -> Linked:
    """`shared`, with beta watching and then BETA linked to it."""
    beta = await shared.watch("beta")
    assert "error" not in await shared.link()
    return Linked(shared.core, shared.nc, shared.alpha, beta)


@pytest.fixture
async def gateway(
    core: CoreService, ore_nats_server: EmbeddedNatsServer, tmp_path: Path
) -> AsyncIterator[Gateway]:
    """The three endpoints of `tests/bridge/gateway.py`, started on the test's `core`."""
    bridge = Gateway(ore_nats_server.url, tmp_path, ore_nats_server.monitor_url)
    try:
        await bridge.start()
        yield bridge
    finally:
        await bridge.close()
