"""Egress: stored events on `P.ev.T` (republished live), deltas live only; the pipeline."""

from __future__ import annotations

import asyncio
import json

import structlog
from nats.aio.client import Client
from nats.js.api import StreamConfig

from ore_core import Text
from ore_core.bus.embedded import EmbeddedNatsServer
from ore_core.bus.pipeline import Pipeline
from ore_core.testing.processors import ScriptedProcessor
from tests.bus.conftest import CoreFactory, Outbox, publish, stored_events, user_message


async def test_every_event_but_deltas_is_stored_on_the_thread_events_subject(
    start_core: CoreFactory, ore_nats_client: Client, outbox: Outbox
) -> None:
    await start_core()

    await publish(ore_nats_client, "t1", user_message("hello there", "m-1"))
    await outbox.done("t1")

    assert [e["kind"] for e in await stored_events(ore_nats_client, "t1")] == [
        "turn_complete",
        "lifecycle",
        "lifecycle",
        "text",
        "turn_complete",
        "lifecycle",
    ]


async def test_deltas_are_published_live_without_a_sequence(
    start_core: CoreFactory, ore_nats_client: Client, outbox: Outbox
) -> None:
    await start_core()

    await publish(ore_nats_client, "t1", user_message("hello there", "m-1"))
    await outbox.done("t1")

    deltas = [m for m in outbox.messages["t1"] if json.loads(m.data)["kind"] == "text_delta"]
    assert [json.loads(m.data)["content"] for m in deltas] == ["hello ", "there"]
    assert all("Nats-Sequence" not in (m.headers or {}) for m in deltas)


async def test_an_event_too_large_to_publish_is_logged_and_the_turn_still_ends(
    start_core: CoreFactory, ore_nats_client: Client, outbox: Outbox
) -> None:
    huge = Text("x" * (ore_nats_client.max_payload + 1))
    await start_core(ScriptedProcessor([[huge]]))

    with structlog.testing.capture_logs() as logs:
        await publish(ore_nats_client, "t1", user_message("hi", "m-1"))
        events = await outbox.done("t1")

    assert "text" not in [e["kind"] for e in events]
    assert any(line["event"] == "message could not be stored" for line in logs)


async def test_pipeline_stores_what_was_published_while_the_server_restarted(
    ore_nats_server: EmbeddedNatsServer, ore_nats_client: Client
) -> None:
    js = ore_nats_client.jetstream()
    await js.add_stream(StreamConfig(name="S", subjects=["s.*"], duplicate_window=60))
    pipeline = Pipeline(ore_nats_client, ack_timeout=0.5)
    await pipeline.start()

    await pipeline.publish("s.a", b"before", {})
    await ore_nats_server.astop()
    await pipeline.publish("s.a", b"during", {})
    await ore_nats_server.astart()
    async with asyncio.timeout(10):
        await pipeline.flush()
    await pipeline.stop()

    state = (await js.stream_info("S")).state
    assert state.messages == 2
    assert pipeline.lost == 0


async def test_pipeline_queues_beyond_its_window_and_stores_everything_in_order(
    ore_nats_client: Client,
) -> None:
    js = ore_nats_client.jetstream()
    await js.add_stream(StreamConfig(name="S", subjects=["s.*"]))
    pipeline = Pipeline(ore_nats_client, window=2)
    await pipeline.start()

    for n in range(50):
        await pipeline.publish("s.a", str(n).encode(), {})
    async with asyncio.timeout(10):
        await pipeline.flush()
    await pipeline.stop()

    stored = [(await js.get_msg("S", seq)).data for seq in range(1, 51)]
    assert stored == [str(n).encode() for n in range(50)]
