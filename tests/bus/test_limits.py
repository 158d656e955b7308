"""JetStream limits reached mid-load: users are told, /readyz fails, nothing is lost (issue 15)."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
from nats.aio.client import Client
from nats.js.api import DiscardPolicy, StreamConfig

from ore_core.bus.egress import STORAGE_FULL
from ore_core.conduit.client import ConduitClient
from ore_core.errors import BusError
from ore_core.events import UserMessageEvent

from .conftest import CoreFactory, Outbox, all_acknowledged, eventually, publish, user_message
from .test_service_e2e import http_status

THREADS = [f"lim{index}" for index in range(12)]


def _told(outbox: Outbox, thread_id: str) -> bool:
    return any(
        event["kind"] == "error" and event.get("code") == STORAGE_FULL
        for event in outbox.events(thread_id)
    )


def _texts(outbox: Outbox, thread_id: str) -> list[str]:
    return [e["content"] for e in outbox.events(thread_id) if e["kind"] == "text"]


def _tight(config: StreamConfig, limit: str, stored_per_thread: int, size: int) -> StreamConfig:
    if limit == "max_bytes":
        return dataclasses.replace(config, max_bytes=size, discard=DiscardPolicy.NEW)
    return dataclasses.replace(
        config,
        max_msgs_per_subject=stored_per_thread,
        discard=DiscardPolicy.NEW,
        discard_new_per_subject=True,
    )


@pytest.mark.slow
@pytest.mark.parametrize("limit", ["max_bytes", "max_msgs_per_subject"])
async def test_a_limit_reached_mid_load_tells_users_fails_readyz_and_loses_nothing(
    start_core: CoreFactory, ore_nats_client: Client, outbox: Outbox, limit: str
) -> None:
    core = await start_core(health_port=0)
    js = ore_nats_client.jetstream()
    for thread in THREADS:
        await publish(ore_nats_client, thread, user_message("first", f"{thread}-1"))
    for thread in THREADS:
        await outbox.done(thread)
    info = await js.stream_info("ORE_EVENTS")
    per_thread = len(outbox.stored(THREADS[0]))

    # The operator (or the account) leaves no room for another stored event.
    await js.update_stream(_tight(info.config, limit, per_thread, info.state.bytes))
    for thread in THREADS:
        await publish(ore_nats_client, thread, user_message("second", f"{thread}-2"))

    # Every user is told, the core says it is not ready, and nothing is acknowledged.
    await outbox.until(lambda: all(_told(outbox, thread) for thread in THREADS))
    assert core.nc.is_connected
    assert await http_status(core.health_port or 0, "/readyz") == 503
    assert await http_status(core.health_port or 0, "/healthz") == 200
    assert not await all_acknowledged(ore_nats_client)
    assert all(outbox.count_done(thread) == 1 for thread in THREADS)

    # Space frees: every held answer is stored and delivered, then everything is acked.
    await js.update_stream(info.config)
    for thread in THREADS:
        await outbox.done(thread, 2)
        assert _texts(outbox, thread) == ["first", "second"]
    await eventually(lambda: all_acknowledged(ore_nats_client))
    await eventually(lambda: _ready(core.health_port or 0))
    stored = await js.stream_info("ORE_EVENTS")
    assert stored.state.messages == 2 * per_thread * len(THREADS)


async def _ready(port: int) -> bool:
    return await http_status(port, "/readyz") == 200


async def test_a_full_ingress_stream_refuses_the_publisher(
    start_core: CoreFactory, ore_nats_client: Client, ore_nats_url: str
) -> None:
    await start_core()
    js = ore_nats_client.jetstream()
    config = (await js.stream_info("ORE_IN")).config
    await js.update_stream(dataclasses.replace(config, max_msgs=1))
    await publish(ore_nats_client, "full1", user_message("one", "f-1"))
    await asyncio.sleep(0)

    # ORE_IN discards new messages when full: the oldest unhandled one is never dropped.
    assert (await js.stream_info("ORE_IN")).config.discard == DiscardPolicy.NEW
    with pytest.raises(Exception, match="maximum messages exceeded"):
        await publish(ore_nats_client, "full2", user_message("two", "f-2"))

    client = await ConduitClient.connect(ore_nats_url, name="probe", send_deadline=5)
    try:
        with pytest.raises(BusError, match=r"ore's ingress stream is full \(maximum messages"):
            await client.send("full3", UserMessageEvent(id="f-3", content="three", user="u"))
    finally:
        await client.close()
