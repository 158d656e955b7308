"""The fault runs hear every message JetStream gives up (its MAX_DELIVERIES advisory)."""

from __future__ import annotations

import contextlib

from nats.aio.client import Client
from nats.js.api import AckPolicy, ConsumerConfig, StreamConfig

from tests.bus import raw
from tests.scale.advisories import GivenUp, MaxDeliveries


async def test_a_message_delivered_max_deliver_times_unacknowledged_is_counted_as_given_up(
    ore_nats_client: Client,
) -> None:
    given_up = MaxDeliveries()
    await given_up.listen(ore_nats_client)
    js = ore_nats_client.jetstream()
    await js.add_stream(StreamConfig(name="GIVE", subjects=["give.*"]))
    await js.add_consumer(
        "GIVE",
        ConsumerConfig(
            durable_name="c", ack_policy=AckPolicy.EXPLICIT, ack_wait=0.1, max_deliver=2
        ),
    )
    await js.publish("give.a", b"never acknowledged")
    await js.publish("give.a", b"acknowledged")
    sub = await js.pull_subscribe_bind("c", "GIVE")
    for msg in await sub.fetch(2, timeout=5):
        if msg.data == b"acknowledged":
            await msg.ack()
    await sub.fetch(1, timeout=5)  # the second delivery, left unacknowledged too
    with contextlib.suppress(TimeoutError):  # a third would be due: the server gives up
        await sub.fetch(1, timeout=1)
    await raw.wait_for(lambda: bool(given_up.given_up))

    assert given_up.given_up == [GivenUp("GIVE", "c", 1, 2)]
