"""ConduitClient: sending with retries, ordered event feeds, durable feeds, permissions.

The core's side of the wire is played by publishing events to `ORE_EVENTS` the way
the core does (the server republishes them to `P.out.T`) and deltas to `P.out.T`.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg

from ore_core import (
    ArtifactEvent,
    BusError,
    ConduitClient,
    Delivery,
    EventContext,
    EventFeed,
    InterruptEvent,
    LifecycleEvent,
    Manager,
    NatsCredentials,
    OutputEvent,
    PermissionDenied,
    Text,
    TextDelta,
    TurnCompleteEvent,
    UserMessageEvent,
)
from ore_core._nats.codec import output_headers
from ore_core.bus.api.control_api import ControlAPI
from ore_core.bus.server.embedded import EmbeddedNatsServer
from ore_core.bus.server.permissions import conduit_permissions
from ore_core.bus.server.streams import BusConfig, ensure_streams
from ore_core.bus.service import CoreService
from ore_core.conduit.client import message_id
from ore_core.conduit.control import ControlClient
from ore_core.events import decode_ingress, encode_batch, encode_event
from ore_core.session.echo import EchoProcessor
from ore_core.session.stores.memory import MemoryStore
from ore_core.subjects import (
    HEADER_KIND,
    HEADER_MSG_ID,
    HEADER_SCHEMA,
    HEADER_TRACEPARENT,
    Subjects,
)
from tests.conduit.conftest import VERSION
from tests.paths import DOCS

NS = "test"  # the namespace of the `client` fixture (its name)
TRACE = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def text(content: str) -> ArtifactEvent:
    return ArtifactEvent(artifact=Text(content), context=EventContext(provenance="test"))


def phase(name: str) -> LifecycleEvent:
    return LifecycleEvent(phase=name, context=EventContext(provenance="test"))  # type: ignore[arg-type]


async def store(nc: Client, subjects: Subjects, thread_id: str, event: OutputEvent) -> int:
    """Append an event to ORE_EVENTS as the core does; its sequence."""
    ack = await nc.jetstream().publish(
        subjects.events(NS, thread_id), encode_event(event), headers=output_headers(event)
    )
    return ack.seq


async def store_batch(nc: Client, subjects: Subjects, thread_id: str, *events: OutputEvent) -> int:
    """Append events to ORE_EVENTS as one batch, as the core stores a turn; its sequence."""
    ack = await nc.jetstream().publish(
        subjects.events(NS, thread_id),
        encode_batch([encode_event(event) for event in events]),
        headers={HEADER_KIND: "batch", HEADER_SCHEMA: "2"},
    )
    return ack.seq


async def delta(nc: Client, subjects: Subjects, thread_id: str, content: str) -> None:
    """Publish a delta straight to P.out.NS.T as the core does."""
    event = ArtifactEvent(artifact=TextDelta(content))
    await nc.publish(
        subjects.output(NS, thread_id), encode_event(event), headers=output_headers(event)
    )
    await nc.flush()


async def take(feed: EventFeed, count: int) -> list[Delivery]:
    """The next `count` deliveries (fails after 5 s)."""

    async def read() -> list[Delivery]:
        return [await anext(feed) for _ in range(count)]

    return await asyncio.wait_for(read(), 30)


def summary(deliveries: list[Delivery]) -> list[tuple[str, str, int | None]]:
    return [(d.thread_id, d.kind, d.sequence) for d in deliveries]


# -- sending --------------------------------------------------------------------------


@pytest.mark.usefixtures("streams")
async def test_send_stores_the_event_with_id_kind_schema_and_trace_headers(
    client: ConduitClient, ore_nats_client: Client, subjects: Subjects
) -> None:
    event = UserMessageEvent(
        id="slack-C1-1", content="hello", context=EventContext(traceparent=TRACE)
    )
    sent = await client.send("t-1", event)
    stored = await ore_nats_client.jetstream().get_msg(
        subjects.inbound_stream, subject=subjects.partitioned("*", NS, "t-1")
    )
    headers = stored.headers or {}
    assert (headers[HEADER_MSG_ID], headers[HEADER_KIND], headers[HEADER_SCHEMA]) == (
        "t-1:slack-C1-1",  # scoped to the thread; no secret, so not keyed
        "user_message",
        "2",
    )
    assert headers[HEADER_TRACEPARENT] == TRACE
    assert decode_ingress(stored.data or b"") == sent.event
    assert sent.event.context.provenance == "test"
    assert (sent.duplicate, sent.sequence) == (False, stored.seq)


@pytest.mark.usefixtures("streams")
async def test_send_of_text_carries_the_conduit_name_and_user(client: ConduitClient) -> None:
    sent = (await client.send("t-1", "hi", id="m-1", user="U123")).event
    assert isinstance(sent, UserMessageEvent)
    assert (sent.id, sent.content) == ("m-1", "hi")
    assert sent.context == EventContext(provenance="test", user="U123")


@pytest.mark.usefixtures("streams")
async def test_a_message_sent_twice_with_one_id_is_stored_once(
    client: ConduitClient, ore_nats_client: Client, subjects: Subjects
) -> None:
    first = await client.send("t-1", "hello", id="m-1")
    second = await client.send("t-1", "hello", id="m-1")
    other_thread = await client.send("t-2", "hello", id="m-1")
    info = await ore_nats_client.jetstream().stream_info(subjects.inbound_stream)
    assert info.state.messages == 2
    assert (first.duplicate, second.duplicate, other_thread.duplicate) == (False, True, False)


def test_a_secret_keys_the_message_id_so_others_cannot_guess_it() -> None:
    plain = message_id("slack", "t-1", "m-1")
    keyed = message_id("slack", "t-1", "m-1", "s3cret")
    assert plain == "t-1:m-1"
    assert keyed.startswith("t-1:")
    assert len(keyed) == 4 + 32
    assert "m-1" not in keyed
    assert keyed != message_id("slack", "t-1", "m-1", "other")
    assert keyed != message_id("nats", "t-1", "m-1", "s3cret")
    assert keyed == message_id("slack", "t-1", "m-1", b"s3cret")


async def test_send_retries_with_the_same_id_until_the_stream_exists(
    ore_nats_url: str, ore_nats_client: Client, subjects: Subjects
) -> None:
    attempts: asyncio.Queue[Msg] = asyncio.Queue()
    # A silent subscriber: every attempt before the stream exists times out.
    await ore_nats_client.subscribe(subjects.inbound(NS, "t-1"), cb=attempts.put)
    await ore_nats_client.flush()
    async with await ConduitClient.connect(
        ore_nats_url, name="test", request_timeout=0.2, send_deadline=10
    ) as client:
        sending = asyncio.ensure_future(client.send("t-1", "hello", id="m-1"))
        seen = [await asyncio.wait_for(attempts.get(), 30)]
        await ensure_streams(ore_nats_client.jetstream(), subjects, BusConfig(partitions=2))
        await asyncio.wait_for(sending, 10)
    while not attempts.empty():
        seen.append(attempts.get_nowait())
    ids = [(attempt.headers or {})[HEADER_MSG_ID] for attempt in seen]
    assert len(ids) >= 2
    assert set(ids) == {"t-1:m-1"}
    info = await ore_nats_client.jetstream().stream_info(subjects.inbound_stream)
    assert info.state.messages == 1


async def test_send_gives_up_after_its_deadline_naming_the_subject(ore_nats_url: str) -> None:
    async with await ConduitClient.connect(
        ore_nats_url, name="test", request_timeout=0.1, send_deadline=0.3
    ) as client:
        with pytest.raises(BusError, match=re.escape("ore.in.test.t-1")):
            await client.send("t-1", "hello")


@pytest.mark.usefixtures("streams")
async def test_interrupt_is_sent_as_an_interrupt_event(
    client: ConduitClient, ore_nats_client: Client, subjects: Subjects
) -> None:
    sent = await client.interrupt("t-1")
    stored = await ore_nats_client.jetstream().get_msg(
        subjects.inbound_stream, subject=subjects.partitioned("*", NS, "t-1")
    )
    assert decode_ingress(stored.data or b"") == sent.event
    assert isinstance(sent.event, InterruptEvent)


async def test_send_to_an_invalid_thread_id_is_refused_before_publishing(
    client: ConduitClient,
) -> None:
    with pytest.raises(ValueError, match="invalid thread id"):
        await client.send("a.b", "hello")


# -- live feeds -----------------------------------------------------------------------

# Feeds catch up through the core's events.read: the control API plays that part.
uses_streams = pytest.mark.usefixtures("streams", "control_api")


@uses_streams
async def test_a_live_feed_delivers_stored_events_in_order_and_deltas(
    client: ConduitClient, ore_nats_client: Client, subjects: Subjects
) -> None:
    async with client.events("t-1") as feed:
        first = await store(ore_nats_client, subjects, "t-1", phase("streaming"))
        await delta(ore_nats_client, subjects, "t-1", "hel")
        second = await store(ore_nats_client, subjects, "t-1", text("hello"))
        got = await take(feed, 3)
    stored = [d for d in got if d.sequence is not None]
    assert summary(stored) == [("t-1", "lifecycle", first), ("t-1", "text", second)]
    [streamed] = [d for d in got if d.sequence is None]
    assert (streamed.kind, streamed.event) == (
        "text_delta",
        ArtifactEvent(artifact=TextDelta("hel")),
    )


@uses_streams
async def test_a_live_feed_skips_other_threads_and_events_before_it_started(
    client: ConduitClient, ore_nats_client: Client, subjects: Subjects
) -> None:
    await store(ore_nats_client, subjects, "t-1", text("before"))
    async with client.events("t-1") as feed:
        await store(ore_nats_client, subjects, "t-2", text("other"))
        after = await store(ore_nats_client, subjects, "t-1", text("after"))
        [got] = await take(feed, 1)
    assert (got.sequence, got.event) == (after, text("after"))


@uses_streams
async def test_kinds_keeps_only_those_kinds(
    client: ConduitClient, ore_nats_client: Client, subjects: Subjects
) -> None:
    async with client.events("t-1", kinds={"text"}) as feed:
        await delta(ore_nats_client, subjects, "t-1", "hel")
        await store(ore_nats_client, subjects, "t-1", phase("streaming"))
        await store(ore_nats_client, subjects, "t-1", text("hello"))
        [got] = await take(feed, 1)
    assert got.kind == "text"


@uses_streams
async def test_a_feed_of_all_threads_names_the_thread_of_each_event(
    client: ConduitClient, ore_nats_client: Client, subjects: Subjects
) -> None:
    async with client.events() as feed:
        await store(ore_nats_client, subjects, "t-1", text("one"))
        await store(ore_nats_client, subjects, "t-2", text("two"))
        got = await take(feed, 2)
    assert [(d.thread_id, d.event) for d in got] == [("t-1", text("one")), ("t-2", text("two"))]


@uses_streams
async def test_a_gap_is_filled_from_the_stream_before_the_next_event(
    client: ConduitClient, ore_nats_client: Client, subjects: Subjects
) -> None:
    js = ore_nats_client.jetstream()
    config = (await js.stream_info(subjects.events_stream)).config
    republish = config.republish
    async with client.events("t-1") as feed:
        config.republish = None  # the next events are stored but never reach the feed live
        await js.update_stream(config)
        missed = [await store(ore_nats_client, subjects, "t-1", text(f"m{i}")) for i in range(3)]
        await store(ore_nats_client, subjects, "t-2", text("other thread"))
        config.republish = republish
        await js.update_stream(config)
        last = await store(ore_nats_client, subjects, "t-1", text("live"))
        got = await take(feed, 4)
    assert [d.sequence for d in got] == [*missed, last]
    assert [d.event for d in got] == [text("m0"), text("m1"), text("m2"), text("live")]


async def test_after_a_reconnect_a_live_feed_reads_what_was_stored_meanwhile(
    ore_nats_server: EmbeddedNatsServer, ore_nats_url: str, subjects: Subjects, manager: Manager
) -> None:
    reconnected = asyncio.Event()

    async def on_reconnect() -> None:
        reconnected.set()

    core = await nats.connect(
        ore_nats_url,
        reconnect_time_wait=0.05,
        max_reconnect_attempts=-1,
        reconnected_cb=on_reconnect,
    )
    await ensure_streams(core.jetstream(), subjects, BusConfig(partitions=2))
    async with (
        ControlAPI(core, manager, subjects, version=VERSION),
        await ConduitClient.connect(ore_nats_url, name="test", reconnect_wait=1.0) as client,
        client.events("t-1") as feed,
    ):
        await store(core, subjects, "t-1", text("before"))
        await take(feed, 1)
        await ore_nats_server.arestart()
        await asyncio.wait_for(reconnected.wait(), 30)
        assert not client.nc.is_connected, "the conduit must still be away for this test"
        meanwhile = [await store(core, subjects, "t-1", text(f"while away {i}")) for i in range(2)]
        got = await take(feed, 2)
    await core.close()
    assert [d.sequence for d in got] == meanwhile


async def test_a_catch_up_while_the_core_is_away_waits_for_it_instead_of_ending_the_feed(
    ore_nats_client: Client, client: ConduitClient, subjects: Subjects, manager: Manager
) -> None:
    await ensure_streams(ore_nats_client.jetstream(), subjects, BusConfig(partitions=2))
    async with ControlAPI(ore_nats_client, manager, subjects, version=VERSION):
        feed = await client.events("t-1").start()
    try:
        feed.resync()  # as after a reconnect; events.read now has no responder
        stored = await store(ore_nats_client, subjects, "t-1", text("while the core restarts"))
        reading = asyncio.create_task(take(feed, 1))
        await asyncio.sleep(0.3)  # lets the catch-up meet the absent core (not an assertion)
        assert not reading.done() or reading.exception() is None
        async with ControlAPI(ore_nats_client, manager, subjects, version=VERSION):
            got = await reading
    finally:
        await feed.close()
    assert [(d.sequence, d.event) for d in got] == [(stored, text("while the core restarts"))]


async def test_a_durable_feed_started_while_the_core_is_away_waits_for_it(
    ore_nats_url: str, ore_nats_client: Client, subjects: Subjects, manager: Manager
) -> None:
    """A conduit started before the core (a host booting, a deploy restarting both) waits
    for it instead of ending with 'cannot read the position of durable feed'."""
    # Requests to the absent core time out after 0.5 s instead of the fixture's 2 s: the
    # test waits out two of them.
    async with await ConduitClient.connect(
        ore_nats_url, name="test", request_timeout=0.5
    ) as client:
        await ensure_streams(ore_nats_client.jetstream(), subjects, BusConfig(partitions=2))
        async with (
            ControlAPI(ore_nats_client, manager, subjects, version=VERSION),
            client.events("t-1", durable="bot"),
        ):
            pass  # the durable exists: its cursor is here
        stored = await store(ore_nats_client, subjects, "t-1", text("while the core was away"))
        asked = asyncio.Queue[None]()

        async def unanswered(msg: Msg) -> None:
            asked.put_nowait(None)  # seen, never answered: the request times out

        listener = await ore_nats_client.subscribe(subjects.api(NS, "cursors.get"), cb=unanswered)
        feed = client.events("t-1", durable="bot")
        starting = asyncio.create_task(feed.start())
        try:
            async with asyncio.timeout(30):  # bounds a hang
                await asyncio.shield(asked.get())
                await asyncio.shield(asked.get())  # asked again after a timeout: still waiting
            assert not starting.done()
            await listener.unsubscribe()
            async with ControlAPI(ore_nats_client, manager, subjects, version=VERSION):
                await starting
                got = await take(feed, 1)
        finally:
            starting.cancel()
            await feed.close()
        assert [(d.sequence, d.event) for d in got] == [(stored, text("while the core was away"))]


@uses_streams
async def test_a_stored_batch_reaches_a_live_feed_as_its_events_in_order(
    client: ConduitClient, ore_nats_client: Client, subjects: Subjects
) -> None:
    async with client.events("t-1") as feed:
        first = await store_batch(
            ore_nats_client, subjects, "t-1", text("a"), text("b"), phase("done")
        )
        second = await store_batch(ore_nats_client, subjects, "t-1", text("c"))
        got = await take(feed, 4)
    assert [d.event for d in got] == [text("a"), text("b"), phase("done"), text("c")]
    assert [d.sequence for d in got] == [first, first, first, second]


@uses_streams
async def test_a_missed_batch_is_caught_up_whole_before_the_next_one(
    client: ConduitClient, ore_nats_client: Client, subjects: Subjects
) -> None:
    js = ore_nats_client.jetstream()
    config = (await js.stream_info(subjects.events_stream)).config
    republish = config.republish
    async with client.events("t-1", kinds={"text", "lifecycle"}) as feed:
        config.republish = None
        await js.update_stream(config)
        await store_batch(ore_nats_client, subjects, "t-1", text("m0"), phase("done"))
        config.republish = republish
        await js.update_stream(config)
        await store_batch(ore_nats_client, subjects, "t-1", text("live"), phase("done"))
        got = await take(feed, 4)
    assert [d.event for d in got] == [text("m0"), phase("done"), text("live"), phase("done")]


@uses_streams
async def test_live_events_sent_together_reach_a_feed_one_by_one(
    client: ConduitClient, ore_nats_client: Client, subjects: Subjects
) -> None:
    events = [phase("submitted"), ArtifactEvent(artifact=TextDelta("hi"))]
    async with client.events("t-1") as feed:
        await ore_nats_client.publish(
            subjects.output(NS, "t-1"),
            encode_batch([encode_event(event) for event in events]),
            headers={HEADER_KIND: "batch", HEADER_SCHEMA: "2"},
        )
        got = await take(feed, 2)
    assert [(d.event, d.sequence) for d in got] == [(events[0], None), (events[1], None)]


# -- durable feeds --------------------------------------------------------------------


@uses_streams
async def test_a_durable_feed_left_in_the_middle_of_a_batch_delivers_it_again_whole(
    client: ConduitClient, ore_nats_client: Client, subjects: Subjects
) -> None:
    async with client.events("t-1", durable="bot") as feed:
        await store_batch(ore_nats_client, subjects, "t-1", text("one"), text("two"))
        await take(feed, 1)  # the block ends without an error after the first event
    async with client.events("t-1", durable="bot") as feed:
        again = await take(feed, 2)
    assert [d.event for d in again] == [text("one"), text("two")]


@uses_streams
async def test_a_durable_feed_acknowledges_a_batch_only_after_its_last_event(
    client: ConduitClient, ore_nats_client: Client, subjects: Subjects
) -> None:
    class PlatformDown(Exception):
        pass

    async def fail_on_the_second_event() -> None:
        async with client.events("t-1", durable="bot") as feed:
            await store_batch(ore_nats_client, subjects, "t-1", text("one"), text("two"))
            await take(feed, 2)
            raise PlatformDown

    with pytest.raises(PlatformDown):
        await fail_on_the_second_event()
    async with client.events("t-1", durable="bot") as feed:
        again = await take(feed, 2)
    assert [d.event for d in again] == [text("one"), text("two")]


@uses_streams
async def test_a_durable_feed_gets_everything_produced_while_it_was_stopped(
    ore_nats_url: str, ore_nats_client: Client, subjects: Subjects
) -> None:
    async with (
        await ConduitClient.connect(ore_nats_url, name="test") as conduit,
        conduit.events(durable="slack") as feed,
    ):
        await store(ore_nats_client, subjects, "t-1", text("seen"))
        assert summary(await take(feed, 1))[0][:2] == ("t-1", "text")
    produced = [
        await store(ore_nats_client, subjects, f"t-{i % 2}", text(f"r{i}")) for i in range(5)
    ]
    async with (
        await ConduitClient.connect(ore_nats_url, name="test") as restarted,
        restarted.events(durable="slack") as feed,
    ):
        got = await take(feed, 5)
    assert [d.sequence for d in got] == produced
    assert [d.event for d in got] == [text(f"r{i}") for i in range(5)]


@uses_streams
async def test_a_durable_feed_delivers_again_the_event_it_failed_on(
    client: ConduitClient, ore_nats_client: Client, subjects: Subjects
) -> None:
    class PlatformDown(Exception):
        pass

    async def handle_then_fail() -> None:
        async with client.events("t-1", durable="bot") as feed:
            await store(ore_nats_client, subjects, "t-1", text("reply"))
            await take(feed, 1)
            raise PlatformDown

    await store(ore_nats_client, subjects, "t-1", phase("submitted"))  # before the durable: skipped
    with pytest.raises(PlatformDown):
        await handle_then_fail()
    async with client.events("t-1", durable="bot") as feed:
        [again] = await take(feed, 1)
    assert again.event == text("reply")


@uses_streams
async def test_a_held_delivery_comes_again_after_a_crash_though_the_reader_moved_past_it(
    client: ConduitClient, ore_nats_client: Client, subjects: Subjects
) -> None:
    """A reader that hands events to other tasks (a renderer per thread) holds them: asking
    for the next event no longer finishes one a renderer has not handled yet."""

    class Killed(Exception):
        pass

    async def hand_on_then_die() -> None:
        async with client.events(durable="bot") as feed:
            await store(ore_nats_client, subjects, "t-1", text("slow"))
            await store(ore_nats_client, subjects, "t-2", text("fast"))
            await store(ore_nats_client, subjects, "t-2", text("next"))
            [slow] = await take(feed, 1)
            feed.hold(slow)  # its renderer is still at work when the process dies
            [fast] = await take(feed, 1)
            feed.hold(fast).release()
            await take(feed, 1)
            raise Killed

    with pytest.raises(Killed):
        await hand_on_then_die()
    async with client.events(durable="bot") as feed:
        again = await take(feed, 3)
    assert [d.event for d in again] == [text("slow"), text("fast"), text("next")]


@uses_streams
async def test_releasing_every_hold_moves_the_cursor_without_asking_for_more(
    client: ConduitClient, ore_nats_client: Client, subjects: Subjects
) -> None:
    class Killed(Exception):
        pass

    async def cursor() -> int:
        reply = await client._call("cursors.get", {"name": "bot"})
        return int(reply["sequence"])

    async def finish_then_die() -> int:
        async with client.events(durable="bot") as feed:
            first = await store(ore_nats_client, subjects, "t-1", text("one"))
            last = await store(ore_nats_client, subjects, "t-2", text("two"))
            [one] = await take(feed, 1)
            holds = [feed.hold(one), feed.hold(one)]  # before asking for the next one
            [two] = await take(feed, 1)
            holds.append(feed.hold(two))
            holds[2].release()
            holds[0].release()
            holds[0].release()  # idempotent: the second hold of `one` still counts
            assert await cursor() < first
            holds[1].release()
            for _ in range(3000):  # bounds a hang
                if await cursor() >= first:
                    break
                await asyncio.sleep(0.01)
            raise Killed(last)

    with pytest.raises(Killed) as killed:
        await finish_then_die()
    (last,) = killed.value.args
    # `two` was read but the reader never asked for more: it is not finished.
    assert await cursor() == last - 1
    async with client.events(durable="bot") as feed:
        [again] = await take(feed, 1)
    assert again.event == text("two")


@uses_streams
async def test_a_durable_feed_receives_deltas_live(
    client: ConduitClient, ore_nats_client: Client, subjects: Subjects
) -> None:
    async with client.events("t-1", durable="bot") as feed:
        await delta(ore_nats_client, subjects, "t-1", "hel")
        [got] = await take(feed, 1)
    assert (got.kind, got.sequence) == ("text_delta", None)


def test_a_durable_name_with_an_underscore_is_refused(client: ConduitClient) -> None:
    with pytest.raises(ValueError, match="durable name"):
        client.events("t-1", durable="my_bot")


# -- end to end through the core ------------------------------------------------------


async def test_a_conduit_talks_to_the_core_through_lookup_send_and_events(
    client: ConduitClient, ore_nats_url: str, manager: Manager
) -> None:
    service = CoreService(manager, servers=[ore_nats_url], config=BusConfig(partitions=2))
    await service.start()
    try:
        thread_id, created = await client.lookup_or_create("test.chat", "c-1")
        async with client.events(thread_id) as feed:
            await client.send(thread_id, "hello there", id="m-1")
            got: list[Delivery] = []
            while not got or got[-1].event != phase("done"):
                got += await take(feed, 1)
    finally:
        await service.stop(grace=0)
    assert created is True
    stored = [d.event for d in got if d.sequence is not None and d.kind == "text"]
    assert stored == [text("hello there")]
    assert "text_delta" in {d.kind for d in got}
    turns = [d.event.turn for d in got if isinstance(d.event, TurnCompleteEvent)]
    assert [turn.event_id for turn in turns][:1] == ["m-1"]


# -- permissions ----------------------------------------------------------------------


def documented_server_config() -> str:
    """The nats-server `authorization` block of docs/writing-a-conduit.md."""
    page = (DOCS / "writing-a-conduit.md").read_text(encoding="utf-8")
    match = re.search(r"```conf\n(authorization \{.*?)```", page, re.DOTALL)
    assert match is not None, "writing-a-conduit.md must show an authorization block"
    return match.group(1)


@pytest.fixture
async def secured(tmp_path: Path) -> AsyncIterator[tuple[str, Client]]:
    """A server configured as the docs say; the core's connection (user `ore`) serves on it."""
    with EmbeddedNatsServer(tmp_path / "secured", config=documented_server_config()) as server:
        core = await nats.connect(server.url, user="ore", password="core-secret")
        await ensure_streams(core.jetstream(), Subjects(), BusConfig(partitions=2))
        async with (
            Manager(MemoryStore(), EchoProcessor()) as manager,
            ControlAPI(core, manager, Subjects(), version=VERSION),
        ):
            yield server.url, core
        await core.close()


async def connect_as_conduit(url: str, **options: Any) -> ConduitClient:
    return await ConduitClient.connect(
        url,
        name="slack",
        credentials=NatsCredentials(user="slack", password="conduit-secret"),
        request_timeout=5,
        **options,
    )


def test_the_documented_block_is_what_ore_auth_grants_a_conduit() -> None:
    config = documented_server_config()
    for subject in (
        *conduit_permissions(Subjects(), "slack")["publish"]["allow"],
        *conduit_permissions(Subjects(), "slack")["subscribe"]["allow"],
    ):
        assert f'"{subject}"' in config
    assert "$JS.API" not in config.split('user: "slack"')[1], "a conduit needs no JetStream API"


async def test_a_conduit_user_may_lookup_send_and_read_live_and_durable_events(
    secured: tuple[str, Client],
) -> None:
    url, core = secured
    async with await connect_as_conduit(url) as conduit:
        thread_id, created = await conduit.lookup_or_create("slack.thread", "C1-1")
        sent = await conduit.send(thread_id, "hello", id="slack-C1-1")
        async with (
            conduit.events(thread_id, durable="slack") as durable,
            conduit.events() as live,
        ):
            ack = await core.jetstream().publish(
                Subjects().events("slack", thread_id),
                encode_event(text("reply")),
                headers=output_headers(text("reply")),
            )
            [from_durable] = await take(durable, 1)
            [from_live] = await take(live, 1)
    assert created is True
    assert sent.duplicate is False
    assert from_durable.sequence == from_live.sequence == ack.seq


async def test_a_conduit_user_gets_permission_denied_from_the_admin_api_at_once(
    secured: tuple[str, Client],
) -> None:
    url, _ = secured
    async with await connect_as_conduit(url) as conduit:
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(PermissionDenied) as denied:
            await ControlClient.beside(conduit).delete_thread("anything")
        assert loop.time() - started < 5, "a refusal must not wait for the request timeout"
    assert denied.value.subject == "ore.admin.threads.delete"
    assert "ore.admin.threads.delete" in str(denied.value)


async def test_a_conduit_that_claims_another_namespace_is_refused_when_a_feed_starts(
    secured: tuple[str, Client],
) -> None:
    url, _ = secured
    async with await connect_as_conduit(url, namespace="other") as conduit:
        with pytest.raises(PermissionDenied, match=re.escape("ore.api.other.events.read")):
            await conduit.events("t-1").start()
        with pytest.raises(PermissionDenied, match=re.escape("ore.api.other.cursors.get")):
            await conduit.events("t-1", durable="x").start()
        with pytest.raises(PermissionDenied, match=re.escape("ore.in.other.t-1")):
            await conduit.send("t-1", "hello")


WATCHER_ONLY = """
authorization {
  users = [
    {user: ore, password: core-secret}
    {user: blind, password: blind-secret, permissions: {
      publish: {allow: ["ore.api.blind.>"]}, subscribe: {allow: ["_INBOX_blind.>"]}
    }}
  ]
}
"""


async def test_a_refused_output_subscription_fails_the_feed(tmp_path: Path) -> None:
    with EmbeddedNatsServer(tmp_path / "blind", config=WATCHER_ONLY) as server:
        core = await nats.connect(server.url, user="ore", password="core-secret")
        await ensure_streams(core.jetstream(), Subjects(), BusConfig(partitions=2))
        async with (
            Manager(MemoryStore(), EchoProcessor()) as manager,
            ControlAPI(core, manager, Subjects(), version=VERSION),
            await ConduitClient.connect(
                server.url,
                name="blind",
                credentials=NatsCredentials(user="blind", password="blind-secret"),
            ) as conduit,
        ):
            # The server may report the refusal after start() returned: then the
            # first read raises it.
            with pytest.raises(
                PermissionDenied, match=re.escape("subscribe to 'ore.out.blind.t-1'")
            ):
                async with conduit.events("t-1") as feed:
                    await asyncio.wait_for(anext(feed), 30)
        await core.close()


async def test_a_feed_before_the_core_runs_says_so(client: ConduitClient) -> None:
    with pytest.raises(BusError, match="ore serve"):
        await client.events("t-1").start()
