"""The conduit's work per message, counted: what keeps a ConduitClient cheap (issue 11).

Sending pipelines publishes and starts no task per message; acks are parsed by the
client itself, errors and all; received header blocks go through ore's parser;
acks and output are handled by inline callbacks of the connection's read loop, and a
live message that follows no gap is queued for the reader by that callback. Counts,
never clocks.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from nats.aio.client import Client
from nats.aio.msg import Msg

from ore_core import BusError, ConduitClient
from ore_core._nats.connection import (
    OreNatsClient,
    connect_nats,
    subscribe_inline,
    subscriptions_registered,
)
from ore_core.conduit import feed as feed_module
from ore_core.conduit.client import Sent, message_id
from ore_core.events import EventDecodeError, encode_batch, encode_event
from ore_core.subjects import HEADER_KIND, HEADER_SCHEMA, Subjects
from tests.conduit.test_client import NS, delta, phase, store_batch, take, text


async def silent_ingress(nc: Client, subjects: Subjects) -> asyncio.Queue[Msg]:
    """Publishes to the conduit's ingress, held unanswered (no stream takes them)."""
    held: asyncio.Queue[Msg] = asyncio.Queue()
    await nc.subscribe(f"{subjects.prefix}.in.{NS}.*", cb=held.put)
    await nc.flush()
    return held


async def until(condition: Callable[[], bool]) -> None:
    """Wait for `condition` (the 30 s bound only stops a hang)."""
    async with asyncio.timeout(30):
        while not condition():  # noqa: ASYNC110 - the feed has no event for its queue
            await asyncio.sleep(0.01)


# -- sending --------------------------------------------------------------------------


@pytest.mark.usefixtures("streams")
async def test_sends_start_no_task_per_message(
    client: ConduitClient, tasks_started: list[str]
) -> None:
    await client.send("t-1", "first")  # subscribes the acks' inbox: one task, once
    before = len(tasks_started)
    for index in range(20):
        sent = await client.send("t-1", f"message {index}")
        assert sent.duplicate is False
    assert tasks_started[before:] == []


async def test_concurrent_sends_are_all_published_before_any_ack(
    client: ConduitClient, ore_nats_client: Client, subjects: Subjects
) -> None:
    held = await silent_ingress(ore_nats_client, subjects)
    sends = [asyncio.ensure_future(client.send(f"t-{n}", "hi", id=f"m-{n}")) for n in range(10)]
    published = [await asyncio.wait_for(held.get(), 30) for _ in range(10)]
    assert not any(send.done() for send in sends), "no ack was sent yet"
    for sequence, msg in enumerate(published, start=1):
        ack = b'{"stream":"ORE_IN","seq":%d,"duplicate":%s}' % (
            sequence,
            b"true" if sequence % 2 else b"false",
        )
        await ore_nats_client.publish(msg.reply, ack)
    sent = await asyncio.wait_for(asyncio.gather(*sends), 30)
    by_id = {s.id: (s.sequence, s.duplicate) for s in sent}
    for sequence, msg in enumerate(published, start=1):
        event_id = msg.headers["Nats-Msg-Id"].split(":")[1] if msg.headers else ""
        assert by_id[event_id] == (sequence, sequence % 2 == 1)
    assert client._publisher.pending == 0
    assert client.permissions._publishers == {}, "no permission watch is left behind"


async def test_unanswered_publishes_time_out_in_order_on_one_timer(
    ore_nats_url: str, ore_nats_client: Client, subjects: Subjects
) -> None:
    held = await silent_ingress(ore_nats_client, subjects)
    async with await ConduitClient.connect(
        ore_nats_url, name=NS, request_timeout=0.2, send_deadline=0.1
    ) as client:
        first = asyncio.ensure_future(client.send("t-1", "one"))
        await asyncio.wait_for(held.get(), 30)
        second = asyncio.ensure_future(client.send("t-2", "two"))
        await asyncio.wait_for(held.get(), 30)
        third = asyncio.ensure_future(client.send("t-3", "three"))
        msg = await asyncio.wait_for(held.get(), 30)
        await ore_nats_client.publish(msg.reply, b'{"stream":"ORE_IN","seq":7}')
        assert (await asyncio.wait_for(third, 30)).sequence == 7
        for sending in (first, second):
            with pytest.raises(BusError, match="1 attempts, last: TimeoutError"):
                await asyncio.wait_for(sending, 30)
        assert client._publisher.pending == 0
        assert not client._publisher._deadlines, "answered and expired publishes are dropped"


async def answer_once(
    ore_nats_client: Client, subjects: Subjects, client: ConduitClient, reply: bytes
) -> asyncio.Future[Sent]:
    held = await silent_ingress(ore_nats_client, subjects)
    sending = asyncio.ensure_future(client.send("t-1", "hi"))
    msg = await asyncio.wait_for(held.get(), 30)
    await ore_nats_client.publish(msg.reply, reply)
    return sending


async def test_an_ack_saying_the_ingress_stream_is_full_is_a_bus_error_saying_so(
    client: ConduitClient, ore_nats_client: Client, subjects: Subjects
) -> None:
    full = b'{"error":{"code":503,"err_code":10077,"description":"maximum messages exceeded"}}'
    sending = await answer_once(ore_nats_client, subjects, client, full)
    with pytest.raises(BusError, match=r"ingress stream is full.*maximum messages exceeded"):
        await asyncio.wait_for(sending, 30)


async def test_an_ack_that_is_not_json_is_a_bus_error_quoting_it(
    client: ConduitClient, ore_nats_client: Client, subjects: Subjects
) -> None:
    sending = await answer_once(ore_nats_client, subjects, client, b"+OK")
    with pytest.raises(BusError, match=r"JetStream answered a publish with b'\+OK'"):
        await asyncio.wait_for(sending, 30)
    assert client._publisher.pending == 0


def test_a_keyed_message_id_is_the_hmac_sha256_of_namespace_thread_and_id() -> None:
    digest = hmac.new(b"s3cret", b"slack|t-1|m-1", hashlib.sha256).hexdigest()
    assert message_id("slack", "t-1", "m-1", "s3cret") == f"t-1:{digest[:32]}"
    # The client copies one keyed HMAC per message: copies never share state.
    assert message_id("slack", "t-1", "m-1", "s3cret") == f"t-1:{digest[:32]}"


# -- headers --------------------------------------------------------------------------

_TOKEN = st.text(st.characters(min_codepoint=33, max_codepoint=126, exclude_characters=":"))
_VALUE = st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=40)


def _block(lines: list[bytes]) -> bytes:
    return b"".join(line + b"\r\n" for line in lines) + b"\r\n"


@given(st.lists(st.tuples(_TOKEN.filter(bool), _VALUE), max_size=10))
def test_plain_headers_parse_exactly_as_nats_py_parses_them(pairs: list[tuple[str, str]]) -> None:
    raw = _block([f"{name}: {value}".encode() for name, value in pairs])
    assert OreNatsClient._parse_header_lines(raw) == Client._parse_header_lines(raw)


@given(st.lists(st.binary(max_size=30), max_size=6))
def test_any_header_block_parses_exactly_as_nats_py_parses_it(lines: list[bytes]) -> None:
    raw = _block([line.replace(b"\r\n", b"") for line in lines])
    assert OreNatsClient._parse_header_lines(raw) == Client._parse_header_lines(raw)


@pytest.mark.parametrize(
    "raw",
    [
        b"Ore-Kind:batch\r\nOre-Schema:\t2 \r\n\r\n",
        "Ore-Kind: caf\u00e9\r\n\r\n".encode(),
        b"Bad Name: x\r\nOre-Kind: batch\r\nno colon\r\n\r\n",
    ],
)
def test_unusual_header_blocks_parse_as_nats_py_parses_them(raw: bytes) -> None:
    assert OreNatsClient._parse_header_lines(raw) == Client._parse_header_lines(raw)


@pytest.mark.usefixtures("streams", "control_api")
async def test_a_connected_client_parses_received_headers_with_ore_s_parser(
    client: ConduitClient,
    ore_nats_client: Client,
    subjects: Subjects,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    parsed: list[bytes] = []
    fast = OreNatsClient._parse_header_lines

    def counting(raw: bytes) -> dict[str, str]:
        parsed.append(bytes(raw))
        return fast(raw)

    monkeypatch.setattr(OreNatsClient, "_parse_header_lines", staticmethod(counting))
    assert isinstance(client.nc, OreNatsClient)
    async with client.events("t-1") as feed:
        await store_batch(ore_nats_client, subjects, "t-1", text("hi"), phase("done"))
        got = await take(feed, 2)
    assert [d.kind for d in got] == ["text", "lifecycle"]
    assert any(b"Nats-Last-Sequence" in raw for raw in parsed), "nats-py no longer calls it"


# -- receiving ------------------------------------------------------------------------


async def connect_ore_client(url: str, **options: Any) -> OreNatsClient:
    nc = await connect_nats([url], **options)
    assert isinstance(nc, OreNatsClient)
    return nc


async def test_an_inline_subscription_is_called_by_the_read_loop_with_the_whole_message(
    ore_nats_url: str, ore_nats_client: Client
) -> None:
    nc = await connect_ore_client(ore_nats_url)
    got: list[tuple[str, str, bytes, dict[str, str] | None, bool]] = []
    try:

        def record(msg: Msg) -> None:
            in_read_loop = asyncio.current_task() is nc._reading_task
            got.append((msg.subject, msg.reply, msg.data, msg.headers, in_read_loop))

        subscription = await nc.subscribe_inline("inline.>", record)
        await subscriptions_registered(nc)  # nc.flush() may overtake the SUB
        await ore_nats_client.publish("inline.a", b"one", reply="back", headers={"K": "v"})
        await ore_nats_client.publish("inline.b", b"two")
        await ore_nats_client.flush()
        await until(lambda: len(got) == 2)
        assert got == [
            ("inline.a", "back", b"one", {"K": "v"}, True),
            ("inline.b", "", b"two", None, True),
        ]
        assert subscription.delivered == 2
        assert subscription.pending_msgs == 0, "nothing waits in nats-py's queue"
        await subscription.unsubscribe()
        assert nc._inline == {}
    finally:
        await nc.close()


async def test_an_inline_callback_that_fails_reports_to_error_cb_and_reading_goes_on(
    ore_nats_url: str, ore_nats_client: Client
) -> None:
    errors: list[Exception] = []

    async def on_error(error: Exception) -> None:
        errors.append(error)

    nc = await connect_ore_client(ore_nats_url, error_cb=on_error)
    got: list[bytes] = []
    try:

        def fragile(msg: Msg) -> None:
            if msg.data == b"bad":
                raise ValueError("cannot handle bad")
            got.append(msg.data)

        await nc.subscribe_inline("inline.x", fragile)
        await subscriptions_registered(nc)
        for data in (b"good", b"bad", b"after"):
            await ore_nats_client.publish("inline.x", data)
        await ore_nats_client.flush()
        await until(lambda: len(got) == 2)
        assert got == [b"good", b"after"]
        assert [str(e) for e in errors] == ["cannot handle bad"]
    finally:
        await nc.close()


async def test_subscribe_inline_on_a_plain_nats_py_connection_calls_back_all_the_same(
    ore_nats_client: Client,
) -> None:
    got: list[bytes] = []
    await subscribe_inline(ore_nats_client, "inline.plain", lambda msg: got.append(msg.data))
    await ore_nats_client.flush()
    await ore_nats_client.publish("inline.plain", b"hello")
    await until(lambda: got == [b"hello"])


@pytest.mark.usefixtures("streams", "control_api")
async def test_live_messages_after_no_gap_reach_the_reader_without_its_backlog(
    client: ConduitClient, ore_nats_client: Client, subjects: Subjects
) -> None:
    async with client.events("t-1") as feed:
        for index in range(5):
            await store_batch(ore_nats_client, subjects, "t-1", text(f"m{index}"), phase("done"))
        await delta(ore_nats_client, subjects, "t-1", "live")
        await until(lambda: len(feed._ready) == 11)
        assert not feed._backlog, "each message was queued by the subscription's callback"
        got = await take(feed, 11)
    assert [d.event for d in got[:2]] == [text("m0"), phase("done")]
    assert [d.kind for d in got].count("lifecycle") == 5
    assert got[-1].kind == "text_delta"


@pytest.mark.usefixtures("streams", "control_api")
async def test_reading_a_feed_starts_no_task_per_message(
    client: ConduitClient, ore_nats_client: Client, subjects: Subjects, tasks_started: list[str]
) -> None:
    async with client.events("t-1") as feed:
        before = len(tasks_started)
        for index in range(10):
            await store_batch(ore_nats_client, subjects, "t-1", text(f"m{index}"), phase("done"))
            async with asyncio.timeout(30):  # bounds a hang; `take` would start a task
                assert (await anext(feed)).event == text(f"m{index}")
                assert (await anext(feed)).event == phase("done")
        assert tasks_started[before:] == []


@pytest.mark.usefixtures("streams", "control_api")
async def test_malformed_output_is_skipped_or_fails_only_the_event_it_is(
    client: ConduitClient, ore_nats_client: Client, subjects: Subjects
) -> None:
    good = encode_event(text("good"))
    bad_phase = b'{"kind":"lifecycle","phase":"sleeping","context":{"provenance":"test"}}'
    no_kind = b'{"content":"who am I"}'
    async with client.events("t-1") as feed:
        await ore_nats_client.publish(
            subjects.output(NS, "t-1"), b"not json", headers={HEADER_KIND: "text"}
        )
        await ore_nats_client.publish(
            subjects.output(NS, "t-1"),
            encode_batch([good, bad_phase, no_kind]),
            headers={HEADER_KIND: "batch", HEADER_SCHEMA: "2"},
        )
        await delta(ore_nats_client, subjects, "t-1", "still flowing")
        first, second, third = await take(feed, 3)
    assert first.event == text("good")
    assert second.kind == "lifecycle"
    with pytest.raises(EventDecodeError, match=r"lifecycle\.phase"):
        second.event  # noqa: B018 - decoding is what fails
    assert third.kind == "text_delta"


@pytest.mark.usefixtures("streams", "control_api")
async def test_a_feed_checks_a_thread_id_once_not_per_message(
    client: ConduitClient,
    ore_nats_client: Client,
    subjects: Subjects,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    checked: list[str] = []
    check = feed_module.is_valid_thread_id

    def counting(thread_id: str) -> bool:
        checked.append(thread_id)
        return check(thread_id)

    monkeypatch.setattr(feed_module, "is_valid_thread_id", counting)
    async with client.events() as feed:
        for thread in ("t-1", "t-2"):
            for index in range(3):
                await store_batch(ore_nats_client, subjects, thread, text(f"m{index}"))
                await delta(ore_nats_client, subjects, thread, "live")
        got = await take(feed, 12)
    assert [(d.thread_id, d.kind) for d in got[:2]] == [("t-1", "text"), ("t-1", "text_delta")]
    assert got[-1].thread_id == "t-2"
    assert checked == ["t-1", "t-2"], "once per thread: at its first message"
