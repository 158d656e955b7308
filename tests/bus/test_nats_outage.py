"""A short NATS outage under one worker is not a lost worker (logs and the takeover count).

Real parts: a nats-server of the kit stopped and started again on its ports, the real
CoreService; for a real takeover, a worker process killed -9 (tests/bus/core_runner.py).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import structlog.testing
from nats.aio.client import Client

from ore_core.bus.server.embedded import EmbeddedNatsServer
from ore_core.bus.server.streams import BusConfig, ensure_streams
from ore_core.bus.service import CoreService
from ore_core.subjects import Subjects
from tests.bus import raw
from tests.bus.conftest import CoreFactory, Outbox

CONFIG = BusConfig(partitions=raw.PARTITIONS, ack_wait=1.0, lease_ttl=1.0)
RUNNER = Path(__file__).with_name("core_runner.py")
LOST_WORKER = "partition taken over from a lost worker"


def _lines(logs: list[dict[str, Any]], event: str) -> list[dict[str, Any]]:
    return [line for line in logs if line["event"] == event]


def _takeovers(service: CoreService) -> int:
    assert service.metrics is not None
    return service.metrics.takeovers


async def test_leases_claimed_back_after_an_outage_are_no_takeover_and_say_so(
    start_core: CoreFactory,
    ore_nats_client: Client,
    ore_nats_server: EmbeddedNatsServer,
    outbox: Outbox,
) -> None:
    service = await start_core(config=CONFIG)
    await raw.wait_for(lambda: service.ready and len(service.ownership.held()) == raw.PARTITIONS)
    before = _takeovers(service)
    with structlog.testing.capture_logs() as logs:
        await ore_nats_server.astop()
        await raw.wait_for(lambda: not service.ownership.held())  # every lease lapsed
        await ore_nats_server.astart()
        await raw.wait_for(
            lambda: service.ready and len(service.ownership.held()) == raw.PARTITIONS
        )
        await raw.publish(ore_nats_client, "t1", raw.user_message("after", "m-1"))
        await outbox.done("t1")
    assert _takeovers(service) == before
    assert _lines(logs, LOST_WORKER) == []
    assert _lines(logs, "partition lease lost; dropping its threads") == []
    back = _lines(logs, "partition lease claimed back after it lapsed here")
    assert sorted(line["partition"] for line in back) == list(range(raw.PARTITIONS))
    assert {line["log_level"] for line in back} == {"info"}


@pytest.fixture
async def runner(ore_nats_url: str, ore_nats_client: Client, tmp_path: Path) -> AsyncIterator[Any]:
    """A worker process holding every partition (its turns never end); killed after."""
    await ensure_streams(ore_nats_client.jetstream(), Subjects(), CONFIG)
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(RUNNER),
        *("--url", ore_nats_url, "--db", str(tmp_path / "threads.db"), "--hold", "-1"),
        *("--partitions", str(CONFIG.partitions), "--ack-wait", str(CONFIG.ack_wait)),
        *("--lease-ttl", str(CONFIG.lease_ttl)),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        yield process
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def test_a_worker_killed_under_its_leases_is_a_counted_takeover(
    runner: Any, start_core: CoreFactory, ore_nats_client: Client
) -> None:
    await raw.publish(ore_nats_client, "t1", raw.user_message("hi", "m-1"))
    assert runner.stdout is not None
    async with asyncio.timeout(60):
        while not (await runner.stdout.readline()).startswith(b"TURN "):
            pass  # the runner holds every partition and a turn of t1 unacknowledged
    with structlog.testing.capture_logs() as logs:
        service = await start_core(config=CONFIG)
        runner.kill()
        await runner.wait()
        await raw.wait_for(lambda: len(service.ownership.held()) == raw.PARTITIONS)
        await raw.wait_for(lambda: bool(_lines(logs, LOST_WORKER)))
    assert _takeovers(service) == raw.PARTITIONS
    assert _lines(logs, "partition lease claimed back after it lapsed here") == []
