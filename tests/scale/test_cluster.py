"""Two `ore serve` workers on a 3-node JetStream cluster (every stream and the lease
bucket R3): kill -9 of the NATS node leading the ingress stream, mid-load, loses,
doubles and reorders nothing."""

from __future__ import annotations

import asyncio
import functools
import os
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path

import nats
import pytest
from nats.aio.client import Client

from ore_core.testing.cluster import EmbeddedNatsCluster
from tests.scale.harness import Load, Workers
from tests.scale.test_workers import ANSWER_TIMEOUT, PARTITIONS, balanced, until

pytestmark = pytest.mark.slow


@pytest.fixture
async def cluster_client(ore_nats_cluster: EmbeddedNatsCluster) -> AsyncIterator[Client]:
    async def quiet(error: Exception) -> None:
        """Reconnect errors are expected while a node is down."""

    client = await nats.connect(
        servers=ore_nats_cluster.urls,
        reconnect_time_wait=0.1,
        max_reconnect_attempts=-1,
        error_cb=quiet,
    )
    try:
        yield client
    finally:
        await client.close()


async def test_kill_9_of_a_nats_node_mid_load_loses_nothing(
    ore_nats_cluster: EmbeddedNatsCluster, cluster_client: Client, tmp_path: Path
) -> None:
    workers = Workers(
        ore_nats_cluster.urls,
        tmp_path,
        delay=0.3,
        partitions=PARTITIONS,
        env={"ORE_NATS__REPLICAS": "3"},
    )
    try:
        a = await workers.start()
        b = await workers.start()
        await until(functools.partial(balanced, cluster_client, a, b), limit=60)
        load = Load(cluster_client, 100)
        await load.listen()
        killed_at = 0.0
        for round_ in range(1, 7):
            await load.send_round()
            if round_ == 2:
                info = await cluster_client.jetstream().stream_info("ORE_IN")
                assert info.cluster is not None
                leader = info.cluster.leader
                node = next(n for n in ore_nats_cluster.nodes if n.store_dir.name == leader)
                killed_at = time.monotonic()
                os.kill(node.pid, signal.SIGKILL)  # a crash: no leader hand-off
            await asyncio.sleep(0.4)

        await load.wait_answered(ANSWER_TIMEOUT)
        report = await load.audit(workers.store_path)
        resumed = load.first_answer_after(killed_at + 0.5, set(load.threads))
        print(
            f"\nR3 cluster, kill -9 of the ORE_IN leader ({leader}): {report}\n"
            f"answers flowing again {min(resumed.values()):.2f}s after the crash, "
            f"all {len(resumed)} threads answered again within {max(resumed.values()):.2f}s; "
            "longest wait of a message: %.2fs from publishing, %.2fs once stored"
            % load.outage(killed_at)
        )
        assert report.clean, report.details[:10]
        assert report.answered == report.sent == 600
        assert a.alive
        assert b.alive
    finally:
        workers.stop_all()
