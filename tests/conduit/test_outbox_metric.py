"""`ore_conduit_outbox_depth`: what a conduit's feeds hold and have not finished (issue 33).

Read when scraped from the feeds themselves: events queued for the reader and
deliveries held by the conduit's own tasks.
"""

from __future__ import annotations

import asyncio

from nats.aio.client import Client
from prometheus_client.parser import text_string_to_metric_families

from ore_core import ConduitClient
from ore_core._nats.codec import output_headers
from ore_core.conduit.counters import render
from ore_core.events import encode_event
from ore_core.subjects import Subjects
from tests.conduit.test_client import take, text, uses_streams

GAUGED = "gauged"  # the namespace whose outbox the test reads


def outbox_depth() -> float:
    """The gauge's value for the `GAUGED` namespace (0 when it has no feed)."""
    for family in text_string_to_metric_families(render().decode()):
        for sample in family.samples:
            if sample.name == "ore_conduit_outbox_depth" and sample.labels["conduit"] == GAUGED:
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
    ore_nats_url: str, ore_nats_client: Client, subjects: Subjects
) -> None:
    # A namespace of its own: the gauge sums every live feed of a namespace in this
    # process, and another test's feed left open on the shared `test` one would count.
    client = await ConduitClient.connect(ore_nats_url, name=GAUGED)
    depths = []
    async with client, client.events(durable="bot") as feed:
        for content in ("one", "two"):
            event = text(content)
            await ore_nats_client.jetstream().publish(
                subjects.events(GAUGED, "t-1"), encode_event(event), headers=output_headers(event)
            )
        [one] = await take(feed, 1)
        hold = feed.hold(one)  # a renderer of the conduit still works on it
        depths.append(await depth_becomes(2))  # `two` queued, `one` held
        await take(feed, 1)
        depths.append(await depth_becomes(1))  # `one` still held
        hold.release()
        depths.append(await depth_becomes(0))
    assert depths == [2, 1, 0]
