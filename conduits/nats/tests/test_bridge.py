"""The bridge end to end: a raw nats-py client, the bridge and a real core over NATS."""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any

from nats.aio.msg import Msg

from ore_conduit_nats import CHANNEL_KEY
from ore_conduit_nats.testing import PlainNatsClient
from ore_core import TurnCompleteEvent
from ore_core.testing.conduit_conformance import ConduitCore

if TYPE_CHECKING:
    from conftest import RunBridge


def as_json(data: bytes) -> Any:
    return json.loads(data)


def kind_of(msg: Msg) -> str:
    """The `Ore-Kind` header the bridge puts on every reply."""
    assert msg.headers is not None
    return msg.headers["Ore-Kind"]


# -- pub/sub ----------------------------------------------------------------------


async def test_plain_text_in_gets_the_plain_reply_on_out(
    run_bridge: RunBridge, raw: PlainNatsClient, ore_conduit_core: ConduitCore
) -> None:
    await run_bridge()
    await raw.publish("support", b"hello")
    reply = await raw.next_out("support")
    thread = await ore_conduit_core.thread_holding("hello")
    assert reply.data == b"echo: hello"
    assert reply.headers is not None
    assert (reply.headers["Ore-Kind"], reply.headers["Ore-Thread-Id"]) == ("text", thread.id)


async def test_json_in_gets_a_json_reply_naming_thread_and_message(
    run_bridge: RunBridge, raw: PlainNatsClient, ore_conduit_core: ConduitCore
) -> None:
    await run_bridge(output="json")
    await raw.publish("support", b'{"text": "hi", "id": "m-1", "user": "u1"}')
    reply = await raw.next_out("support")
    thread = await ore_conduit_core.thread_holding("hi")
    assert as_json(reply.data) == {"text": "echo: hi", "thread_id": thread.id, "in_reply_to": "m-1"}


async def test_a_channel_is_the_thread_with_that_channel_in_its_metadata(
    run_bridge: RunBridge, raw: PlainNatsClient, ore_conduit_core: ConduitCore
) -> None:
    await run_bridge()
    await raw.publish("support", b"first")
    await raw.publish("support", b"second")
    await raw.next_out("support")
    await raw.next_out("support")
    thread = await ore_conduit_core.thread_holding("first")
    assert thread.meta().get(CHANNEL_KEY) == "support"
    assert (await ore_conduit_core.thread_holding("second")).id == thread.id


async def test_two_channels_stay_separate(
    run_bridge: RunBridge, raw: PlainNatsClient, ore_conduit_core: ConduitCore
) -> None:
    await run_bridge()
    await raw.publish("alpha", b"for alpha")
    await raw.publish("beta", b"for beta")
    assert (await raw.next_out("beta")).data == b"echo: for beta"
    assert (await raw.next_out("alpha")).data == b"echo: for alpha"
    alpha = await ore_conduit_core.thread_holding("for alpha")
    assert alpha.id != (await ore_conduit_core.thread_holding("for beta")).id


async def test_a_message_republished_with_the_same_nats_msg_id_is_answered_once(
    run_bridge: RunBridge, raw: PlainNatsClient
) -> None:
    await run_bridge()
    await raw.publish("support", b"once", {"Nats-Msg-Id": "h-1"})
    await raw.publish("support", b"once", {"Nats-Msg-Id": "h-1"})
    await raw.publish("support", b"then", {"Nats-Msg-Id": "h-2"})
    assert (await raw.next_out("support")).data == b"echo: once"
    assert (await raw.next_out("support")).data == b"echo: then"


async def test_the_json_id_wins_over_the_nats_msg_id(
    run_bridge: RunBridge, raw: PlainNatsClient
) -> None:
    await run_bridge(output="json")
    await raw.publish("support", b'{"text": "x", "id": "json-id"}', {"Nats-Msg-Id": "header-id"})
    assert as_json((await raw.next_out("support")).data)["in_reply_to"] == "json-id"


async def test_the_sender_and_its_trace_reach_the_core(
    run_bridge: RunBridge, raw: PlainNatsClient, ore_conduit_core: ConduitCore
) -> None:
    await run_bridge()
    trace = "0af7651916cd43dd8448eb211c80319c"
    async with ore_conduit_core.client_for("nats").events(kinds={"turn_complete"}) as feed:
        await raw.publish(
            "support",
            b'{"text": "traced", "user": "alice"}',
            {"traceparent": f"00-{trace}-b7ad6b7169203331-01"},
        )
        delivery = await asyncio.wait_for(anext(aiter(feed)), 10)
    assert isinstance(delivery.event, TurnCompleteEvent)
    context = delivery.event.context
    assert (context.provenance, context.user) == ("nats", "alice")
    assert context.traceparent.startswith(f"00-{trace}-")  # the same trace ...
    assert "b7ad6b7169203331" not in context.traceparent  # ... with the bridge's own span


# -- request-reply ------------------------------------------------------------------


async def test_a_request_gets_the_finished_answer_as_its_reply(
    run_bridge: RunBridge, raw: PlainNatsClient
) -> None:
    await run_bridge()
    reply = await raw.request("support", b"question")
    assert (reply.data, kind_of(reply)) == (b"echo: question", "text")


async def test_a_json_request_gets_a_json_answer(
    run_bridge: RunBridge, raw: PlainNatsClient, ore_conduit_core: ConduitCore
) -> None:
    await run_bridge(output="json")
    reply = await raw.request("support", b'{"text": "q", "id": "q-1"}')
    thread = await ore_conduit_core.thread_holding("q")
    assert as_json(reply.data) == {"text": "echo: q", "thread_id": thread.id, "in_reply_to": "q-1"}


async def test_an_answer_to_a_request_is_also_published_on_out(
    run_bridge: RunBridge, raw: PlainNatsClient
) -> None:
    await run_bridge()
    await raw.request("support", b"asked")
    assert (await raw.next_out("support")).data == b"echo: asked"


async def test_a_request_unanswered_in_time_gets_an_error_naming_the_timeout(
    run_bridge: RunBridge, raw: PlainNatsClient, ore_conduit_core: ConduitCore
) -> None:
    gate = ore_conduit_core.processor.gate()
    await run_bridge(request_timeout=0.2)
    reply = await raw.request("support", b"slow")
    gate.release()
    assert kind_of(reply) == "error"
    assert reply.data.startswith(b"error: no answer within 0.2s (request_timeout)")


async def test_a_request_retried_while_it_is_answered_gets_the_same_answer_once(
    run_bridge: RunBridge, raw: PlainNatsClient, ore_conduit_core: ConduitCore
) -> None:
    gate = ore_conduit_core.processor.gate()
    await run_bridge()
    body = b'{"text": "retry me", "id": "r-1"}'
    first = asyncio.ensure_future(raw.request("support", body))
    await asyncio.wait_for(gate.started.wait(), 10)
    second = asyncio.ensure_future(raw.request("support", body))
    # A channel's messages are handled in order: once this one (sent after the retry)
    # is refused, the retry has been taken in and joined the first request's answer.
    await asyncio.ensure_future(raw.request("support", b""))
    gate.release()
    replies = await asyncio.gather(first, second)
    assert [r.data for r in replies] == [b"\xe2\x80\xa6done", b"\xe2\x80\xa6done"]  # "…done"
    thread = await ore_conduit_core.thread_holding("retry me")
    assert len(thread.turns()) == 2  # one question, one answer


async def test_a_request_retried_after_its_answer_gets_the_stored_answer(
    run_bridge: RunBridge, raw: PlainNatsClient
) -> None:
    # JetStream drops the retry as a duplicate, so no event comes: the bridge reads the
    # stored answer at once instead of waiting request_timeout (60 s, past the client's
    # patience) for events that will not come.
    await run_bridge(request_timeout=60)
    body = b'{"text": "asked twice", "id": "r-2"}'
    first = await raw.request("support", body)
    second = await raw.request("support", body)
    assert first.data == second.data == b"echo: asked twice"


async def test_an_interrupt_request_is_acknowledged(
    run_bridge: RunBridge, raw: PlainNatsClient
) -> None:
    await run_bridge()
    reply = await raw.nc.request(raw.subject("support", "interrupt"), b"", timeout=10)
    assert reply.data == b"interrupted"


# -- malformed input --------------------------------------------------------------


async def test_invalid_json_gets_an_error_on_out_and_reaches_no_thread(
    run_bridge: RunBridge, raw: PlainNatsClient, ore_conduit_core: ConduitCore
) -> None:
    await run_bridge()
    await raw.publish("support", b'{"text": "unterminated')
    reply = await raw.next_out("support")
    assert reply.data.startswith(b"error: invalid JSON")
    assert kind_of(reply) == "error"
    assert await ore_conduit_core.store.list() == []


async def test_a_json_request_without_text_gets_an_error_reply_naming_it(
    run_bridge: RunBridge, raw: PlainNatsClient
) -> None:
    await run_bridge(output="json")
    reply = await raw.request("support", b'{"user": "bob"}')
    assert "text: Field required" in as_json(reply.data)["error"]


async def test_a_message_over_max_bytes_is_refused_naming_the_limit(
    run_bridge: RunBridge, raw: PlainNatsClient
) -> None:
    await run_bridge(max_bytes=16)
    reply = await raw.request("support", b"x" * 17)
    assert reply.data == b"error: message of 17 bytes is over the limit of 16 bytes (max_bytes)"


async def test_after_a_malformed_message_the_channel_still_works(
    run_bridge: RunBridge, raw: PlainNatsClient
) -> None:
    await run_bridge()
    await raw.publish("support", b"{not json")
    await raw.publish("support", b"fine")
    assert (await raw.next_out("support")).data.startswith(b"error: ")
    assert (await raw.next_out("support")).data == b"echo: fine"
