"""`ore_conduit_outbox_depth`: what a conduit's feeds hold and have not finished (issue 33).

Read when scraped from the feeds themselves: events queued for the reader and
deliveries held by the conduit's own tasks.
"""

from __future__ import annotations

import asyncio

from nats.aio.client import Client
from prometheus_client.parser import text_string_to_metric_families

from ore_core import ConduitClient
from ore_core.conduit.counters import render
from ore_core.subjects import Subjects
from tests.conduit.test_client import NS, store, take, text, uses_streams


def outbox_depth() -> float:
    """The gauge's value for the `client` fixture's namespace (0 when it has no feed)."""
    for family in text_string_to_metric_families(render().decode()):
        for sample in family.samples:
            if sample.name == "ore_conduit_outbox_depth" and sample.labels["conduit"] == NS:
                return sample.value
    return 0.0


async def depth_becomes(expected: float) -> float:
    """The gauge once it reads `expected` (polled, bounded); else its last value."""
    for _ in range(3000):
        if (depth := outbox_depth()) == expected:
            return depth
        await asyncio.sleep(0.01)
    return outbox_depth()


@uses_streams
async def test_the_outbox_depth_counts_events_queued_and_held_until_finished(
    client: ConduitClient, ore_nats_client: Client, subjects: Subjects
) -> None:
    depths = []
    async with client.events(durable="bot") as feed:
        await store(ore_nats_client, subjects, "t-1", text("one"))
        await store(ore_nats_client, subjects, "t-1", text("two"))
        [one] = await take(feed, 1)
        hold = feed.hold(one)  # a renderer of the conduit still works on it
        depths.append(await depth_becomes(2))  # `two` queued, `one` held
        await take(feed, 1)
        depths.append(await depth_becomes(1))  # `one` still held
        hold.release()
        depths.append(await depth_becomes(0))
    assert depths == [2, 1, 0]
