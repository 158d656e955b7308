"""The conduit SDK on nats-py's plain client: the fallback of the private transport.

When nats-py lacks a private name `ore_core._nats` relies on (`internals.PRIVATE_NAMES`),
`connect_nats` logs one warning and returns nats-py's own client, and every send,
subscription and ack takes nats-py's public path (`ore_core._nats.plain`). Here
`ORE_NATS_PLAIN=1` forces that path and the SDK's key cases run through it again, taken
from tests/conduit/test_client.py as they are: publish and subscribe (live and
durable feeds), request (the control API), acked publishes (sends, de-duplicated), and
a whole turn through a core. Slower, never different.
"""

from __future__ import annotations

import asyncio

import pytest
import structlog
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg

from ore_core import ConduitClient
from ore_core._nats import internals
from ore_core._nats.connection import OreNatsClient, connect_nats
from ore_core._nats.wire import header_block, publish_now, wait_flushed
from tests.conduit import test_client as ordinary


@pytest.fixture(autouse=True)
def plain_client(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every connection of these tests is nats-py's own client."""
    monkeypatch.setenv(internals.PLAIN_ENV, "1")


test_send_stores_the_event_with_id_kind_schema_and_trace_headers = (
    ordinary.test_send_stores_the_event_with_id_kind_schema_and_trace_headers
)
test_a_message_sent_twice_with_one_id_is_stored_once = (
    ordinary.test_a_message_sent_twice_with_one_id_is_stored_once
)
test_interrupt_is_sent_as_an_interrupt_event = ordinary.test_interrupt_is_sent_as_an_interrupt_event
test_a_live_feed_delivers_stored_events_in_order_and_deltas = (
    ordinary.test_a_live_feed_delivers_stored_events_in_order_and_deltas
)
test_a_gap_is_filled_from_the_stream_before_the_next_event = (
    ordinary.test_a_gap_is_filled_from_the_stream_before_the_next_event
)
test_a_durable_feed_gets_everything_produced_while_it_was_stopped = (
    ordinary.test_a_durable_feed_gets_everything_produced_while_it_was_stopped
)
test_a_conduit_talks_to_the_core_through_lookup_send_and_events = (
    ordinary.test_a_conduit_talks_to_the_core_through_lookup_send_and_events
)


async def test_the_plain_path_connects_nats_py_s_own_client(client: ConduitClient) -> None:
    nc = client._nc
    assert type(nc) is NatsClient
    assert not isinstance(nc, OreNatsClient)


def test_the_pinned_nats_py_has_every_private_name_the_transport_uses() -> None:
    assert internals.missing_internals() == []


def test_a_missing_private_name_is_named() -> None:
    names = {"Client": ("_flush_pending", "_no_such_method"), "Msg": ("_no_such_flag",)}
    assert internals.missing_internals(names) == ["Client._no_such_method", "Msg._no_such_flag"]


async def test_a_missing_private_name_falls_back_with_one_warning(
    ore_nats_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(internals.PLAIN_ENV)
    names = {**internals.PRIVATE_NAMES, "Client()": ("_pending", "_gone_in_a_new_release")}
    monkeypatch.setattr(internals, "PRIVATE_NAMES", names)
    internals._checked.cache_clear()
    try:
        with structlog.testing.capture_logs() as logs:
            first = await connect_nats([ore_nats_url])
            second = await connect_nats([ore_nats_url])
        await first.close()
        await second.close()
    finally:
        internals._checked.cache_clear()
    assert (type(first), type(second)) == (NatsClient, NatsClient)
    warnings = [entry for entry in logs if entry["log_level"] == "warning"]
    assert len(warnings) == 1
    assert warnings[0]["missing"] == "Client()._gone_in_a_new_release"


async def test_with_every_private_name_there_the_fast_client_connects(
    ore_nats_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(internals.PLAIN_ENV)
    nc = await connect_nats([ore_nats_url])
    await nc.close()
    assert isinstance(nc, OreNatsClient)


async def test_a_burst_on_the_plain_path_arrives_whole_and_in_order(
    ore_nats_url: str, ore_nats_client: NatsClient
) -> None:
    received: list[bytes] = []
    got_all = asyncio.Event()

    async def receive(msg: Msg) -> None:
        received.append(msg.data)
        if len(received) == 200:
            got_all.set()

    await ore_nats_client.subscribe("plain.burst", cb=receive)
    await ore_nats_client.flush()
    sender = await connect_nats([ore_nats_url])
    try:
        assert type(sender) is NatsClient
        block = header_block({"Ore-Kind": "batch"})
        for index in range(200):
            publish_now(sender, "plain.burst", str(index).encode(), header=block)
        await wait_flushed(sender)
        await sender.flush()
        await asyncio.wait_for(got_all.wait(), 30)
    finally:
        await sender.close()
    assert received == [str(index).encode() for index in range(200)]
