"""Ingress: ORE_IN messages reach their thread's stream and are acked once handled."""

from __future__ import annotations

import asyncio
from typing import Any

from nats.aio.client import Client
from nats.aio.msg import Msg

from ore_core import Role
from ore_core.bus.ingress.puller import Puller
from ore_core.bus.server.streams import BusConfig, consumer_name, ensure_streams
from ore_core.session.stores.memory import MemoryStore
from ore_core.subjects import Subjects
from ore_core.testing.processors import GatedProcessor
from tests.bus import raw
from tests.bus.conftest import CoreFactory, Outbox

ACK_WAIT = 0.6


def texts(outbox: Outbox, thread_id: str) -> list[str]:
    return [e["content"] for e in outbox.events(thread_id) if e["kind"] == "text"]


async def test_a_user_message_to_an_unknown_thread_creates_it(
    start_core: CoreFactory, ore_nats_client: Client, outbox: Outbox, store: MemoryStore
) -> None:
    await start_core()

    await raw.publish(ore_nats_client, "new-thread", raw.user_message("hi", "m-1"))
    await outbox.done("new-thread")

    thread = await store.get("new-thread")
    assert [t.role for t in thread.turns()] == [Role.USER, Role.ASSISTANT]


async def test_a_message_is_acknowledged_only_once_it_is_handled(
    start_core: CoreFactory, ore_nats_client: Client, outbox: Outbox
) -> None:
    processor = GatedProcessor()
    await start_core(processor)
    await raw.publish(ore_nats_client, "t1", raw.user_message("hi", "m-1"))
    await asyncio.wait_for(processor.started.wait(), 10)

    assert (await raw.consumer_of(ore_nats_client, "t1")).num_ack_pending == 1
    processor.release()
    await outbox.done("t1")
    await raw.eventually(lambda: raw.all_acknowledged(ore_nats_client))


async def test_running_and_queued_messages_are_not_redelivered_during_a_long_turn(
    start_core: CoreFactory, ore_nats_client: Client, outbox: Outbox
) -> None:
    processor = GatedProcessor()
    await start_core(processor, config=BusConfig(partitions=raw.PARTITIONS, ack_wait=ACK_WAIT))
    await raw.publish(ore_nats_client, "t1", raw.user_message("first", "m-1"))
    await raw.publish(ore_nats_client, "t1", raw.user_message("second", "m-2"))
    await asyncio.wait_for(processor.started.wait(), 10)

    await asyncio.sleep(ACK_WAIT * 3)  # time passing is the point: three ack waits
    processor.release()
    await outbox.done("t1", count=2)

    info = await raw.consumer_of(ore_nats_client, "t1")
    assert info.delivered is not None
    assert info.delivered.consumer_seq == 2  # each of the two messages delivered once
    assert processor.calls == 2


async def test_an_interrupt_cancels_the_turn_and_acknowledges_the_messages_it_dropped(
    start_core: CoreFactory, ore_nats_client: Client, outbox: Outbox
) -> None:
    processor = GatedProcessor()
    await start_core(processor)
    await raw.publish(ore_nats_client, "t1", raw.user_message("first", "m-1"))
    await raw.publish(ore_nats_client, "t1", raw.user_message("queued", "m-2"))
    await asyncio.wait_for(processor.started.wait(), 10)

    await raw.publish(ore_nats_client, "t1", {"kind": "interrupt", "id": "i-1"})

    events = await outbox.done("t1", count=2)
    assert {"kind": "lifecycle", "phase": "cancelled", "context": {"provenance": "raw"}} in events
    await raw.eventually(lambda: raw.all_acknowledged(ore_nats_client))
    assert processor.calls == 1


async def test_a_duplicate_publish_is_stored_and_answered_once(
    start_core: CoreFactory, ore_nats_client: Client, outbox: Outbox
) -> None:
    await start_core()
    message = raw.user_message("hi", "m-1")

    first = await raw.publish(ore_nats_client, "t1", message)
    second = await raw.publish(ore_nats_client, "t1", message)
    await raw.publish(ore_nats_client, "t1", raw.user_message("next", "m-2"))
    await outbox.done("t1", count=2)

    assert second.duplicate
    assert second.seq == first.seq
    assert texts(outbox, "t1") == ["hi", "next"]


async def test_an_event_id_published_again_after_the_dedup_window_is_answered_once(
    start_core: CoreFactory, ore_nats_client: Client, outbox: Outbox, store: MemoryStore
) -> None:
    await start_core()
    message = raw.user_message("hi", "m-1")

    await raw.publish(ore_nats_client, "t1", message, msg_id="first-publish")
    await raw.publish(ore_nats_client, "t1", message, msg_id="after-the-window")
    await raw.publish(ore_nats_client, "t1", raw.user_message("next", "m-2"))
    await outbox.done("t1", count=3)

    assert texts(outbox, "t1") == ["hi", "next"]
    thread = await store.get("t1")
    assert [t.role for t in thread.all_turns()] == [Role.USER, Role.ASSISTANT] * 2


async def pull_into(
    nc: Client, received: list[bytes], enough: asyncio.Event, count: int, **options: Any
) -> Puller:
    """A started Puller on partition 0 that acks and records every message."""

    async def handle(msg: Msg) -> None:
        received.append(msg.data)
        await msg.ack()
        if len(received) >= count:
            enough.set()

    puller = Puller(nc, "ORE_IN", consumer_name(0), handle, **options)
    await puller.start()
    return puller


async def test_a_puller_hands_on_more_than_one_batch_in_order(ore_nats_client: Client) -> None:
    await ensure_streams(ore_nats_client.jetstream(), Subjects(), BusConfig(partitions=1))
    received: list[bytes] = []
    enough = asyncio.Event()
    puller = await pull_into(ore_nats_client, received, enough, 20, batch=4)

    for n in range(20):
        await ore_nats_client.jetstream().publish("ore.in.raw.t1", str(n).encode())
    await asyncio.wait_for(enough.wait(), 10)
    await puller.stop()

    assert received == [str(n).encode() for n in range(20)]


async def test_a_puller_keeps_receiving_after_its_requests_expire(ore_nats_client: Client) -> None:
    await ensure_streams(ore_nats_client.jetstream(), Subjects(), BusConfig(partitions=1))
    received: list[bytes] = []
    enough = asyncio.Event()
    puller = await pull_into(ore_nats_client, received, enough, 1, expires=0.3, heartbeat=0.1)

    await asyncio.sleep(0.9)  # time passing is the point: several request lifetimes
    await ore_nats_client.jetstream().publish("ore.in.raw.t1", b"late")
    await asyncio.wait_for(enough.wait(), 10)
    await puller.stop()

    assert received == [b"late"]
