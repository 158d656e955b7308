"""A bridge on two `ore serve` workers, one killed (kill -9) mid-relay (issue 29).

Two real workers share the partitions (SQLite store, echo processor); the gateway of
`tests/bridge/gateway.py` (Slack on its fake and the NATS conduit as processes, the
terminal as an SDK client) links three endpoints to one thread. All three send; the
worker that owns the thread is killed while copies are under way and a new one takes
its place. Every endpoint must show every other endpoint's messages once, in order,
labelled, never its own; and whichever worker answers, `threads.get` and `links.list`
say the same.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest
from nats.aio.client import Client

from ore_core.bus.server.embedded import EmbeddedNatsServer
from ore_core.subjects import partition_of
from tests.bridge.gateway import ENDPOINTS, Gateway, clean, expected
from tests.scale.conftest import PoolFactory
from tests.scale.harness import Worker, Workers, held_by, leases
from tests.scale.test_control_api_workers import requests_per_worker
from tests.scale.test_workers import until

pytestmark = pytest.mark.slow

PARTITIONS = 8
N = 10  # messages per endpoint
ASKED = 12  # requests per method: each worker answers some of them


@pytest.fixture
def workers(start_workers: PoolFactory) -> Workers:
    lease = {"ORE_NATS__LEASE_TTL": "1.5"}  # a killed worker's share moves after 1.5 s
    return start_workers(PARTITIONS, 0.05, env=lease)


async def balanced(nc: Client, *members: Worker) -> bool:
    """Both workers hold a share and together they hold every partition."""
    table = await leases(nc)
    counts = [len(held_by(table, w)) for w in members]
    return sum(counts) == PARTITIONS and min(counts) > 0


async def answers(nc: Client, subject: str, body: dict[str, Any]) -> list[str]:
    """`ASKED` answers to one request (the queue group picks a worker each time)."""
    replies = []
    for _ in range(ASKED):
        reply = await nc.request(subject, json.dumps(body).encode(), timeout=10)
        replies.append(reply.data.decode())
    return replies


async def test_a_worker_killed_mid_relay_leaves_every_endpoint_everything_once_in_order(
    workers: Workers,
    ore_nats_server: EmbeddedNatsServer,
    ore_nats_client: Client,
    tmp_path: Path,
) -> None:
    nc = ore_nats_client
    team = [await workers.start(), await workers.start()]
    await until(lambda: balanced(nc, *team))
    gateway = Gateway(ore_nats_server.url, tmp_path, ore_nats_server.monitor_url)
    try:
        await gateway.start()
        thread = gateway.thread
        held = await leases(nc)
        owner: Worker = next(
            w for w in team if partition_of(thread, PARTITIONS) in held_by(held, w)
        )
        half = N // 2
        sent = expected(slack=range(N), nats=range(N), stdin=range(N))
        await gateway.send_together(slack=range(half), nats=range(1, half), stdin=range(half))
        owner.signal(signal.SIGKILL)  # copies of the messages above are under way
        await owner.wait()
        team = [w for w in team if w is not owner] + [await workers.start()]
        await gateway.send_together(slack=range(half, N), nats=range(half, N), stdin=range(half, N))
        await gateway.until(lambda: all(gateway.has_all(e, sent) for e in ENDPOINTS), sent)
        counts = gateway.counts(sent)
        print(f"\nworker killed mid-relay: {json.dumps(counts)}")
        assert counts == {"slack": clean(2 * N), "nats": clean(2 * N), "stdin": clean(2 * N)}

        await until(lambda: balanced(nc, *team))
        differ = {}
        for subject, body in [
            *((f"ore.api.{ns}.threads.get", {"id": thread}) for ns in ENDPOINTS),
            ("ore.admin.links.list", {"thread": thread}),
        ]:
            said = await answers(nc, subject, body)
            if len(set(said)) != 1 or "error" in json.loads(said[0]):
                differ[subject] = sorted(set(said))
        assert differ == {}
        assert min(await requests_per_worker(nc, "threads_get")) > 0  # both answered
        assert min(await requests_per_worker(nc, "admin_links_list")) > 0
    finally:
        await gateway.close()
