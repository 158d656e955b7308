"""Egress: one stored batch per turn on `P.ev.T` (republished live), live-only events on
`P.out.T`; the pipeline."""

from __future__ import annotations

import asyncio

import structlog
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import StreamConfig

from ore_core import Text
from ore_core.bus.egress.pipeline import Pipeline
from ore_core.bus.server.embedded import EmbeddedNatsServer
from ore_core.testing.processors import ScriptedProcessor
from tests.bus import raw
from tests.bus.conftest import CoreFactory, Outbox


async def test_a_turn_is_stored_as_one_batch_of_its_durable_events_ending_with_done(
    start_core: CoreFactory, ore_nats_client: Client, outbox: Outbox
) -> None:
    await start_core()

    await raw.publish(ore_nats_client, "t1", raw.user_message("hello there", "m-1"))
    await outbox.done("t1")

    (batch,) = await raw.stored_messages(ore_nats_client, "t1")
    assert [(e["kind"], e.get("phase")) for e in batch] == [
        ("turn_complete", None),
        ("text", None),
        ("turn_complete", None),
        ("lifecycle", "done"),
    ]


async def test_deltas_and_lifecycle_progress_are_published_live_without_a_sequence(
    start_core: CoreFactory, ore_nats_client: Client, outbox: Outbox
) -> None:
    await start_core()

    await raw.publish(ore_nats_client, "t1", raw.user_message("hello there", "m-1"))
    await outbox.done("t1")

    live = [m for m in outbox.messages["t1"] if "Nats-Sequence" not in (m.headers or {})]
    events = [event for m in live for event in raw.unpack(m.data)]
    assert [e["content"] for e in events if e["kind"] == "text_delta"] == ["hello ", "there"]
    assert [e["phase"] for e in events if e["kind"] == "lifecycle"] == ["submitted", "streaming"]
    assert {e["kind"] for e in events} == {"lifecycle", "text_delta"}


async def test_a_metadata_change_on_an_idle_thread_is_stored_at_once(
    start_core: CoreFactory, ore_nats_client: Client, outbox: Outbox
) -> None:
    service = await start_core()
    await raw.publish(ore_nats_client, "t1", raw.user_message("hi", "m-1"))
    await outbox.done("t1")

    stream = await service.manager.attach("t1")
    await stream.set_metadata("title", "greeting")

    await outbox.until(lambda: len(outbox.stored("t1")) == 2)
    assert [e["kind"] for e in raw.unpack(outbox.stored("t1")[1].data)] == ["properties"]


async def test_a_turn_too_large_for_one_message_is_stored_in_several_in_order(
    start_core: CoreFactory, ore_nats_client: Client, outbox: Outbox
) -> None:
    words = ["x" * (ore_nats_client.max_payload // 3) for _ in range(4)]
    await start_core(ScriptedProcessor([[Text(word) for word in words]]))

    await raw.publish(ore_nats_client, "t1", raw.user_message("hi", "m-1"))
    await outbox.done("t1")

    stored = await raw.stored_messages(ore_nats_client, "t1")
    assert len(stored) > 1
    events = [event for batch in stored for event in batch]
    assert [e["content"] for e in events if e["kind"] == "text"] == words
    assert events[-1] == {"kind": "lifecycle", "phase": "done", "context": {"provenance": "raw"}}


async def test_an_event_too_large_to_publish_is_logged_and_the_turn_still_ends(
    start_core: CoreFactory, ore_nats_client: Client, outbox: Outbox
) -> None:
    huge = Text("x" * (ore_nats_client.max_payload + 1))
    await start_core(ScriptedProcessor([[huge]]))

    with structlog.testing.capture_logs() as logs:
        await raw.publish(ore_nats_client, "t1", raw.user_message("hi", "m-1"))
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


async def test_pipeline_never_gives_up_a_message_while_no_stream_answers(
    ore_nats_client: Client,
) -> None:
    """A stream without a leader (a cluster election) answers nothing for longer than any
    number of attempts: the message is retried until it is stored, never dropped (a drop
    would let ingress acknowledge a message whose answer was never stored)."""
    pipeline = Pipeline(ore_nats_client, ack_timeout=0.5, attempts=2, hold_retry=0.05)
    await pipeline.start()
    sends: asyncio.Queue[Msg] = asyncio.Queue()
    await ore_nats_client.subscribe("late.a", cb=sends.put)
    await pipeline.publish("late.a", b"answer", {"Nats-Msg-Id": "m-1"})
    for _ in range(3 * 2):  # three times `attempts` sends, each answered "no responders"
        await asyncio.wait_for(sends.get(), 30)

    js = ore_nats_client.jetstream()
    await js.add_stream(StreamConfig(name="LATE", subjects=["late.*"]))  # the leader is back
    async with asyncio.timeout(30):
        await pipeline.flush()
    await pipeline.stop()

    assert (await js.stream_info("LATE")).state.messages == 1
    assert pipeline.lost == 0


async def test_pipeline_keeps_order_per_subject_across_retries(ore_nats_client: Client) -> None:
    """A thread's answer that is being retried (no stream answered) is stored before the
    thread's next answer, published meanwhile; other subjects do not wait for it."""
    pipeline = Pipeline(ore_nats_client, ack_timeout=0.5, hold_retry=0.05)
    await pipeline.start()
    sends: asyncio.Queue[Msg] = asyncio.Queue()
    await ore_nats_client.subscribe("ord.a", cb=sends.put)
    await pipeline.publish("ord.a", b"1", {})
    for _ in range(2):  # sent, refused ("no responders"), sent again
        await asyncio.wait_for(sends.get(), 30)
    js = ore_nats_client.jetstream()
    await js.add_stream(StreamConfig(name="ORD", subjects=["ord.*"]))
    await pipeline.publish("ord.a", b"2", {})
    await pipeline.publish("ord.b", b"other", {})
    async with asyncio.timeout(30):
        await pipeline.flush()
    await pipeline.stop()

    stored = [(await js.get_msg("ORD", seq)) for seq in (1, 2, 3)]
    assert [m.data for m in stored if m.subject == "ord.a"] == [b"1", b"2"]
    assert pipeline.pending == 0
    assert pipeline.lost == 0
