"""Fixtures for the bridge tests: a plain NATS user of the bridge, and the bridge itself.

The core (`ore_conduit_core`) and `ore_start_conduit` come from the conduit conformance
kit, part of the ore pytest kit (enabled in the repository's top-level conftest.py).
Tests run in pytest's importlib mode: test modules import nothing from here at
runtime, only fixtures and, for type checkers, names.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
import pytest_asyncio

from ore_conduit_nats import NatsBridge
from ore_conduit_nats.testing import PlainNatsClient
from ore_core.testing.conduit_conformance import ConduitCore, RunningConduit, StartConduit

TIMEOUT = 30.0


@pytest_asyncio.fixture
async def raw(ore_conduit_core: ConduitCore) -> AsyncIterator[PlainNatsClient]:
    """A plain NATS connection using the bridge (`.out` of every channel collected)."""
    client = await PlainNatsClient.connect(ore_conduit_core.nats_url, patience=TIMEOUT)
    try:
        yield client
    finally:
        await client.close()


RunBridge = Callable[..., Awaitable[RunningConduit]]


@pytest.fixture
def run_bridge(ore_start_conduit: StartConduit, raw: PlainNatsClient) -> RunBridge:
    """`await run_bridge(**config)`: the bridge, running and listening (stopped after)."""

    async def run(**config: Any) -> RunningConduit:
        conduit = await ore_start_conduit(NatsBridge, config)
        await asyncio.wait_for(raw.wait_until_ready(), TIMEOUT)
        return conduit

    return run
