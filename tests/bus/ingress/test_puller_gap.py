"""A delivery that never arrives must not let a later one of its thread go first.

A consumer leader or a route that dies can lose a delivery in flight without a
reconnect or a leadership notice reaching the worker; JetStream sends it again only
after `ack_wait`, behind newer messages of the same thread (seen as an order violation
in tests/scale/test_cluster.py). The consumer's delivery sequence, on each ack subject,
shows the loss: the puller hands nothing more on and asks to be pulled afresh. Real
parts: the kit's nats-server, a JetStream stream and pull consumer, the Puller. The
loss is made by a second pull request that takes one delivery the puller never sees.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import nats
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig, StreamConfig
from nats.js.client import JetStreamContext

from ore_core.bus.ingress.puller import Puller
from tests.bus.raw import eventually

STREAM, CONSUMER = "GAP", "gap-p0"
NEXT = f"$JS.API.CONSUMER.MSG.NEXT.{STREAM}.{CONSUMER}"


async def until(changed: asyncio.Condition, condition: Callable[[], bool]) -> None:
    async with asyncio.timeout(10), changed:
        await changed.wait_for(condition)


async def waiting_pulls(js: JetStreamContext, count: int) -> None:
    """Until the consumer holds `count` pull requests (the server's own count)."""

    async def held() -> bool:
        return (await js.consumer_info(STREAM, CONSUMER)).num_waiting == count

    await eventually(held)


def notify(changed: asyncio.Condition) -> None:
    async def wake() -> None:
        async with changed:
            changed.notify_all()

    asyncio.get_running_loop().create_task(wake())


async def test_a_delivery_taken_elsewhere_stops_the_puller_before_the_next_one(
    ore_nats_client: Client, ore_nats_url: str
) -> None:
    js = ore_nats_client.jetstream()
    await js.add_stream(StreamConfig(name=STREAM, subjects=["gap.>"]))
    await js.add_consumer(
        STREAM, ConsumerConfig(durable_name=CONSUMER, ack_policy=AckPolicy.EXPLICIT)
    )
    handled: list[bytes] = []
    interrupted: list[int] = []
    stolen: list[bytes] = []
    changed = asyncio.Condition()  # notified by the handler, the thief and the puller

    def handle(msg: Msg) -> None:
        handled.append(msg.data)
        notify(changed)

    def on_interrupted() -> None:
        interrupted.append(1)
        notify(changed)

    puller = Puller(
        ore_nats_client,
        STREAM,
        CONSUMER,
        handle,
        batch=1,  # one request per delivery: the next is queued as each arrives
        on_interrupted=on_interrupted,
    )
    other = await nats.connect(ore_nats_url)
    await puller.start()
    try:
        await js.publish("gap.t", b"m1")
        await until(changed, lambda: handled == [b"m1"])
        await waiting_pulls(js, 1)  # the puller's next request is queued on the server
        inbox = other.new_inbox()

        async def steal(msg: Msg) -> None:
            stolen.append(msg.data)
            notify(changed)

        await other.subscribe(inbox, cb=steal)
        await other.publish(NEXT, b'{"batch": 1, "expires": 30000000000}', reply=inbox)
        await other.flush()
        await waiting_pulls(js, 2)  # queued after the puller's request, before its next one
        await js.publish("gap.t", b"m2")
        await until(changed, lambda: handled == [b"m1", b"m2"])
        await js.publish("gap.t", b"m3")  # to the other request: lost to the puller
        await until(changed, lambda: stolen == [b"m3"])
        await js.publish("gap.t", b"m4")
        await js.publish("gap.t", b"m5")
        await until(changed, lambda: bool(interrupted))
        await ore_nats_client.flush()
        assert handled == [b"m1", b"m2"]  # m4 and m5 wait for the fresh pull
        assert interrupted == [1]
    finally:
        await puller.stop()
        await other.close()
