"""A send's header block is built from pre-encoded parts (issue 11), byte for byte.

`ConduitClient.send` writes the block from constant lines per kind plus the message
id's line, and publishes through `wire.publish_now` instead of nats-py's `publish`.
These tests hold the block to `wire.header_block` of the headers a send used to pass
(tests/_nats/test_wire.py holds that to nats-py's own bytes) and count that nats-py's
publish chain is not used.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from nats.aio.client import Client

from ore_core import ConduitClient
from ore_core import subjects as ore_subjects
from ore_core._nats import wire
from ore_core._nats.wire import header_block, publish_now
from ore_core.conduit.client import message_id
from ore_core.events import EventContext, UserMessageEvent
from tests.conduit.test_client import NS
from tests.conduit.test_client_work import silent_ingress


@pytest.mark.parametrize(
    ("secret", "traceparent", "interrupt", "event_id"),
    [
        (None, "", False, "m-1"),
        ("s3cret", "", False, "m-1"),
        (None, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", False, "m-1"),
        ("s3cret", "", True, "m-1"),
        (None, "", False, " 1700000000.000100 "),
    ],
)
async def test_a_send_writes_what_nats_py_would_write_for_its_headers(
    ore_nats_url: str,
    ore_nats_client: Client,
    subjects: ore_subjects.Subjects,
    secret: str | None,
    traceparent: str,
    interrupt: bool,
    event_id: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    held = await silent_ingress(ore_nats_client, subjects)
    written: list[tuple[str, bytes, str, bytes]] = []

    def recording(nc: Client, subject: str, payload: bytes, reply: str, header: bytes) -> bool:
        written.append((subject, payload, reply, header))
        return publish_now(nc, subject, payload, reply, header)

    monkeypatch.setattr(wire, "publish_now", recording)  # before the client takes it
    async with await ConduitClient.connect(ore_nats_url, name=NS, secret=secret) as client:
        if interrupt:
            sending = asyncio.ensure_future(client.interrupt("t-1", id=event_id))
        else:
            context = EventContext(provenance=NS, traceparent=traceparent)
            event = UserMessageEvent(id=event_id, content="hi", context=context)
            sending = asyncio.ensure_future(client.send("t-1", event))
        msg = await asyncio.wait_for(held.get(), 30)
        headers = {
            ore_subjects.HEADER_MSG_ID: message_id(NS, "t-1", event_id, secret),
            ore_subjects.HEADER_KIND: "interrupt" if interrupt else "user_message",
            ore_subjects.HEADER_SCHEMA: str(ore_subjects.SCHEMA_VERSION),
        }
        if traceparent:
            headers[ore_subjects.HEADER_TRACEPARENT] = traceparent
        assert written == [(msg.subject, msg.data, msg.reply, header_block(headers))]
        assert msg.headers == {name: value.strip() for name, value in headers.items()}
        await ore_nats_client.publish(msg.reply, b'{"stream":"ORE_IN","seq":3}')
        assert (await asyncio.wait_for(sending, 30)).sequence == 3


@pytest.mark.usefixtures("streams")
async def test_sends_never_go_through_nats_py_s_publish(
    client: ConduitClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    publish = Client._send_publish

    async def counting(self: Client, *args: Any, **kwargs: Any) -> None:
        calls.append(args[0])
        await publish(self, *args, **kwargs)

    monkeypatch.setattr(Client, "_send_publish", counting)
    for index in range(5):
        sent = await client.send(f"t-{index}", "hello", id=f"m-{index}")
        assert sent.sequence == index + 1
        assert not sent.duplicate
    assert calls == []
