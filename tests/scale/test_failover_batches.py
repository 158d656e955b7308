"""kill -9 of one of two workers under load: every stored answer is in a whole batch.

Whatever moment the kill catches (mid-turn, between a save and its batch), every
message's stored batch must hold what a normal turn stores: the user's `turn_complete`,
the `text`, the assistant's `turn_complete` and `done`, each with the message's context
(a conduit that filters by its provenance shows nothing else). Counted over every
stored batch, with the harness's audit of lost, doubled and reordered answers.
"""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from nats.aio.client import Client
from nats.js.api import DeliverPolicy

from ore_core.bus.embedded import EmbeddedNatsServer
from tests.scale.harness import Load, Workers
from tests.scale.test_control_api_workers import PARTITIONS, balanced
from tests.scale.test_workers import until

ANSWER_TIMEOUT = 90.0

pytestmark = pytest.mark.slow


@pytest.fixture
async def workers(ore_nats_server: EmbeddedNatsServer, tmp_path: Path) -> AsyncIterator[Workers]:
    pool = Workers([ore_nats_server.url], tmp_path, delay=0.05, partitions=PARTITIONS)
    pool.env = {"ORE_NATS__LEASE_TTL": "1.5"}
    try:
        yield pool
    finally:
        pool.stop_all()


def incomplete(batch: list[dict[str, Any]]) -> bool:
    """A batch with an answer that is not a whole normal turn with its context."""
    kinds = [e.get("kind") for e in batch]
    roles = [e["turn"]["role"] for e in batch if e.get("kind") == "turn_complete"]
    contexts = {json.dumps(e.get("context"), sort_keys=True) for e in batch}
    if "assistant" not in roles:
        return False  # a `done` alone, for a message answered before
    return (
        kinds != ["turn_complete", "text", "turn_complete", "lifecycle"]
        or roles != ["user", "assistant"]
        or contexts != {json.dumps({"provenance": "load"})}
    )


async def stored_batches(nc: Client) -> list[list[dict[str, Any]]]:
    js = nc.jetstream()
    total = (await js.stream_info("ORE_EVENTS")).state.messages
    sub = await js.subscribe("ore.ev.>", ordered_consumer=True, deliver_policy=DeliverPolicy.ALL)
    batches = []
    try:
        for _ in range(total):
            msg = await sub.next_msg(timeout=10)
            batches.append(json.loads(msg.data)["events"])
    finally:
        await sub.unsubscribe()
    return batches


async def test_a_kill_9_mid_load_leaves_every_answer_in_a_whole_batch_with_its_context(
    workers: Workers, ore_nats_client: Client
) -> None:
    a = await workers.start()
    b = await workers.start()
    await until(lambda: balanced(ore_nats_client, a, b))
    load = Load(ore_nats_client, 40)
    await load.listen()
    for round_ in range(1, 7):
        await load.send_round()
        if round_ == 2:  # turns in flight on both workers
            a.signal(signal.SIGKILL)
            await a.wait()
            await workers.start()
        await asyncio.sleep(0.2)
    await load.wait_answered(ANSWER_TIMEOUT)

    report = await load.audit(workers.store_path)
    batches = await stored_batches(ore_nats_client)
    broken = [batch for batch in batches if incomplete(batch)]
    print(f"\nkill -9 of 1 of 2: {report}; {len(batches)} batches, {len(broken)} incomplete")
    assert report.clean, report.details[:10]
    assert report.answered == report.sent == 240
    assert broken == []
