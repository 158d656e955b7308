"""A send writes its `HPUB` itself (issue 11): the same bytes and errors as nats-py.

`ConduitClient.send` builds the header block from pre-encoded parts and the publisher
writes the command without nats-py's `publish` (two subject regexes, a regex, strip,
translate and four buffer extends per header). These tests hold it to nats-py's own
output, byte for byte, and count that nats-py's header encoder is not called.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from nats.aio.client import DEFAULT_PENDING_SIZE, Client
from nats.errors import (
    BadHeaderError,
    BadSubjectError,
    ConnectionClosedError,
    MaxPayloadError,
)

from ore_core import ConduitClient
from ore_core.conduit.client import message_id
from ore_core.conduit.connection import PermissionWatch
from ore_core.conduit.publisher import AckedPublisher, header_block
from ore_core.events import EventContext, UserMessageEvent
from ore_core.subjects import (
    HEADER_KIND,
    HEADER_MSG_ID,
    HEADER_SCHEMA,
    HEADER_TRACEPARENT,
    SCHEMA_VERSION,
    Subjects,
)
from tests.bus_client.test_client import NS
from tests.bus_client.test_client_work import silent_ingress


def run_now(coro: Coroutine[Any, Any, Any]) -> Any:
    """Run a coroutine that never suspends (a publish into an unconnected buffer)."""
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    raise AssertionError("the coroutine suspended")


def recording_client() -> tuple[Client, list[bytes]]:
    """An unconnected nats-py client whose commands are recorded instead of buffered."""
    nc = Client()
    nc._max_pending_size = DEFAULT_PENDING_SIZE  # what connect() sets: buffered until then
    commands: list[bytes] = []

    async def record(command: bytes, priority: bool = False) -> None:
        commands.append(command)

    nc._send_command = record  # type: ignore[method-assign,assignment]
    return nc, commands


def both(subject: str, reply: str, payload: bytes, headers: dict[str, str]) -> tuple[Any, Any]:
    """(nats-py's command or error, the publisher's command or error) for one publish."""
    results: list[Any] = []
    for ours in (False, True):
        nc, commands = recording_client()
        try:
            if ours:
                publisher = AckedPublisher(nc, PermissionWatch(), 1.0)
                run_now(publisher._write(subject, reply, payload, header_block(headers)))
            else:
                run_now(nc.publish(subject, payload, reply=reply, headers=headers))
            results.append((commands, nc.stats["out_msgs"], nc.stats["out_bytes"]))
        except Exception as exc:
            results.append(type(exc))
    return results[0], results[1]


_NAMES = st.text("!#$%&'*+-.^_`|~0123456789AZaz", min_size=1, max_size=8)


@given(
    headers=st.dictionaries(_NAMES, st.text(max_size=20), max_size=4),
    payload=st.binary(max_size=40),
)
def test_a_written_publish_is_byte_for_byte_what_nats_py_writes(
    headers: dict[str, str], payload: bytes
) -> None:
    theirs, ours = both("ore.in.ns.t-1", "_INBOX_ns.x.7", payload, headers)
    assert isinstance(theirs, tuple)
    assert ours == theirs


@pytest.mark.parametrize(
    ("subject", "headers", "error"),
    [
        ("ore.in.ns.t 1", {"K": "v"}, BadSubjectError),
        ("", {"K": "v"}, BadSubjectError),
        ("ore.in.ns.t\r\n", {"K": "v"}, BadSubjectError),
        ("ore.in.ns.t", {"K y": "v"}, BadHeaderError),
        ("ore.in.ns.t", {" ": "skipped", "K": " v\r\n "}, None),
    ],
)
def test_a_written_publish_refuses_what_nats_py_refuses(
    subject: str, headers: dict[str, str], error: type[Exception] | None
) -> None:
    theirs, ours = both(subject, "_INBOX_ns.x.1", b"{}", headers)
    assert ours == theirs
    if error is not None:
        assert ours is error
    else:
        assert isinstance(ours, tuple)
        assert ours[0][0].startswith(b"HPUB ore.in.ns.t _INBOX_ns.x.1 ")


def test_a_written_publish_fails_on_a_closed_connection_or_a_large_payload() -> None:
    nc, commands = recording_client()
    publisher = AckedPublisher(nc, PermissionWatch(), 1.0)
    nc._max_payload = 4
    with pytest.raises(MaxPayloadError):
        run_now(publisher._write("ore.in.ns.t", "r.1", b"12345", header_block({})))
    nc._status = Client.CLOSED
    with pytest.raises(ConnectionClosedError):
        run_now(publisher._write("ore.in.ns.t", "r.1", b"1", header_block({})))
    assert commands == []


@pytest.mark.parametrize(
    ("secret", "traceparent", "interrupt"),
    [
        (None, "", False),
        ("s3cret", "", False),
        (None, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", False),
        ("s3cret", "", True),
    ],
)
async def test_a_send_writes_what_nats_py_would_write_for_its_headers(
    ore_nats_url: str,
    ore_nats_client: Client,
    subjects: Subjects,
    secret: str | None,
    traceparent: str,
    interrupt: bool,
) -> None:
    held = await silent_ingress(ore_nats_client, subjects)
    async with await ConduitClient.connect(ore_nats_url, name=NS, secret=secret) as client:
        nc = client.nc
        commands: list[bytes] = []
        send_command = nc._send_command

        async def record(command: bytes, priority: bool = False) -> None:
            commands.append(command)
            await send_command(command, priority)

        nc._send_command = record  # type: ignore[method-assign,assignment]
        if interrupt:
            sending = asyncio.ensure_future(client.interrupt("t-1", id="m-1"))
        else:
            context = EventContext(provenance=NS, traceparent=traceparent)
            event = UserMessageEvent(id="m-1", content="hi", context=context)
            sending = asyncio.ensure_future(client.send("t-1", event))
        msg = await asyncio.wait_for(held.get(), 30)
        headers = {
            HEADER_MSG_ID: message_id(NS, "t-1", "m-1", secret),
            HEADER_KIND: "interrupt" if interrupt else "user_message",
            HEADER_SCHEMA: str(SCHEMA_VERSION),
        }
        if traceparent:
            headers[HEADER_TRACEPARENT] = traceparent
        nc._send_command = send_command  # type: ignore[method-assign]
        expected, _ = both(msg.subject, msg.reply, msg.data, headers)
        assert [c for c in commands if c.startswith(b"HPUB ")] == expected[0]
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
