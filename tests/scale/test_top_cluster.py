"""`ore top` against a 3-node JetStream cluster with three `ore serve` workers (issue 33):
every worker answers, whichever node it and `ore top` are connected to, and their
partitions cover the deployment's."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from ore_core.testing.cluster import EmbeddedNatsCluster
from tests.ore_process import ORE
from tests.scale.harness import Workers
from tests.scale.test_workers import until

pytestmark = pytest.mark.slow

PARTITIONS = 8


def top_json(url: str) -> dict[str, Any]:
    """`ore top --once --json` connected to the node at `url`."""
    result = subprocess.run(
        [str(ORE), "top", "--once", "--json", "--window", "1", "--nats", url],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "ORE_LOAD_PLUGINS": ""},
        check=True,
    )
    answer: dict[str, Any] = json.loads(result.stdout)
    return answer


async def test_top_shows_every_worker_of_a_cluster_and_their_partitions_cover_all(
    ore_nats_cluster: EmbeddedNatsCluster, tmp_path: Path
) -> None:
    # Each worker on its own node, all on one store; `ore top` on the first node only:
    # the stats request and the answers cross the cluster's routes.
    pools = [
        Workers(
            [url],
            tmp_path / f"node{index}",
            partitions=PARTITIONS,
            env={"ORE_NATS__REPLICAS": "3", "ORE_STORE__PATH": str(tmp_path / "threads.db")},
        )
        for index, url in enumerate(ore_nats_cluster.urls)
    ]
    views: list[dict[str, Any]] = []

    async def all_shown() -> bool:
        views.append(await asyncio.to_thread(top_json, ore_nats_cluster.urls[0]))
        shown = views[-1]["workers"]
        held = sorted(p for w in shown for p in w["partitions"])
        return (
            len(shown) == len(pools)
            and all(w["partitions"] for w in shown)
            and (held == list(range(PARTITIONS)))
        )

    try:
        for pool in pools:
            (pool.directory).mkdir()
            await pool.start()
        await until(all_shown, limit=90)
    finally:
        for pool in pools:
            pool.stop_all()
    shown = views[-1]["workers"]
    pids = sorted(int(w["worker"].split("-")[-2]) for w in shown)
    assert pids == sorted(pool.started[0].pid for pool in pools)
    assert sorted(p for w in shown for p in w["partitions"]) == list(range(PARTITIONS))
