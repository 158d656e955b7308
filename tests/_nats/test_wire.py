"""`publish_now` and `header_block` send what nats-py's `publish` sends (issue 11).

The core publishes through `ore_core._nats.wire` instead of nats-py's coroutine
chain; these tests hold the two to the same bytes and the same refusals, byte for byte
against nats-py's own code, and count the flusher wake-ups. They also fail when a
nats-py release changes the private parts `wire` relies on.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.errors import (
    BadHeaderError,
    BadSubjectError,
    ConnectionClosedError,
    ConnectionDrainingError,
    MaxPayloadError,
    MsgAlreadyAckdError,
    NotJSMessageError,
    OutboundBufferLimitError,
)

from ore_core._nats import wire
from ore_core._nats.connection import OreNatsClient
from ore_core._nats.wire import header_block, publish_now, settle_now

_NAME = st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=12)
_VALUE = st.text(st.characters(min_codepoint=1, max_codepoint=0x2FF), max_size=30)
_SUBJECT = st.text(st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=20)
# Any text, including what nats-py refuses (empty, spaces, CR LF) and non-ASCII.
_ANY_SUBJECT = st.text(st.sampled_from("ab.$_-* \t\r\n\u00e9\u4e2d"), max_size=12)


def offline(status: int = Client.CONNECTED, **attributes: Any) -> Client:
    """A nats-py client in `status` that connects nowhere: what it sends stays pending."""
    nc = OreNatsClient()
    nc._status = status
    nc._max_payload = 1024 * 1024
    for name, value in attributes.items():
        setattr(nc, name, value)
    return nc


async def nats_py_command(
    subject: str, payload: bytes, reply: str, headers: dict[str, str] | None
) -> bytes:
    """The command nats-py's own `publish` queues for this message."""
    nc = offline()
    await nc.publish(subject, payload, reply=reply, headers=headers)
    return b"".join(nc._pending)


def ore_command(subject: str, payload: bytes, reply: str, headers: dict[str, str] | None) -> bytes:
    nc = offline()
    publish_now(nc, subject, payload, reply, header_block(headers) if headers else b"")
    return b"".join(nc._pending)


@given(st.lists(st.tuples(_NAME, _VALUE), max_size=6), _SUBJECT, st.binary(max_size=40))
def test_the_header_block_and_command_are_the_bytes_nats_py_sends(
    pairs: list[tuple[str, str]], subject: str, payload: bytes
) -> None:
    headers = dict(pairs)
    try:
        expected = asyncio.run(nats_py_command(subject, payload, "_INBOX.x.1", headers or None))
    except BadHeaderError:
        with pytest.raises(BadHeaderError):
            header_block(headers)
        return
    assert ore_command(subject, payload, "_INBOX.x.1", headers or None) == expected


@pytest.mark.parametrize(
    "headers",
    [
        {"Ore-Kind": "batch", "Ore-Schema": "2", "Nats-Msg-Id": "abc-1"},
        {" Ore-Kind ": " batch ", "": "skipped", "traceparent": "00-a\r\nb-01"},
        {"Ore-Kind": "caf\u00e9"},
    ],
)
async def test_usual_and_unusual_headers_are_sent_as_nats_py_sends_them(
    headers: dict[str, str],
) -> None:
    for reply in ("", "_INBOX.x.7"):
        expected = await nats_py_command("ore.ev.raw.t1", b"{}", reply, headers)
        assert ore_command("ore.ev.raw.t1", b"{}", reply, headers) == expected
    expected = await nats_py_command("$JS.ACK.x", b"", "", None)
    assert ore_command("$JS.ACK.x", b"", "", None) == expected


def test_an_invalid_header_name_is_refused_as_nats_py_refuses_it() -> None:
    with pytest.raises(BadHeaderError):
        header_block({"Bad Name": "x"})
    with pytest.raises(BadHeaderError):  # the cached name is checked every time
        header_block({"Bad Name": "x"})


@given(_ANY_SUBJECT, _ANY_SUBJECT, st.binary(max_size=20), st.booleans())
def test_any_subject_and_reply_give_nats_py_s_bytes_or_its_error_every_time(
    subject: str, reply: str, payload: bytes, with_header: bool
) -> None:
    headers = {"Ore-Kind": "batch"} if with_header else None
    try:
        expected: bytes | type[Exception] = asyncio.run(
            nats_py_command(subject, payload, reply, headers)
        )
    except BadSubjectError:
        expected = BadSubjectError
    for _ in range(2):  # the second time from the cache of checked subjects
        if expected is BadSubjectError:
            with pytest.raises(BadSubjectError):
                ore_command(subject, payload, reply, headers)
        else:
            assert ore_command(subject, payload, reply, headers) == expected


_ACKS = st.sampled_from(
    [Msg.Ack.Ack, Msg.Ack.Nak, Msg.Ack.Progress, Msg.Ack.Term, b'-NAK {"delay":1000000}']
)


@given(_ANY_SUBJECT, _ACKS)
def test_settle_now_sends_what_nats_py_sends_for_the_ack_subject(
    reply: str, payload: bytes
) -> None:
    nc = offline()
    msg = Msg(_client=nc, subject="ore.in.raw.t1", reply=reply)
    if not reply:
        with pytest.raises(NotJSMessageError):
            settle_now(nc, msg, payload)
        return
    try:
        expected = asyncio.run(nats_py_command(reply, payload, "", None))
    except BadSubjectError:
        with pytest.raises(BadSubjectError):
            settle_now(nc, msg, payload)
        assert not msg._ackd
        return
    settle_now(nc, msg, payload)
    assert b"".join(nc._pending) == expected
    assert msg._ackd is (payload != Msg.Ack.Progress)


class _CountingPattern:
    """`_SUBJECT_INVALID_RE`, counting the strings it searches."""

    def __init__(self) -> None:
        self.searched: list[str] = []
        self._pattern = wire._SUBJECT_INVALID_RE

    def search(self, text: str) -> object:
        self.searched.append(text)
        return self._pattern.search(text)


def test_a_subject_is_checked_once_an_ack_subject_is_not_kept_a_bad_one_is_refused_each_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pattern = _CountingPattern()
    monkeypatch.setattr(wire, "_SUBJECT_INVALID_RE", pattern)
    nc = offline()
    for index in range(3):
        publish_now(nc, "wire.checked.once", str(index).encode())
    assert pattern.searched == ["wire.checked.once"]
    ack = "$JS.ACK.ORE_IN.c.1.9.9.1.0"
    settle_now(nc, Msg(_client=nc, subject="ore.in.raw.t1", reply=ack))
    assert pattern.searched == ["wire.checked.once", ack]
    assert ack not in wire._SUBJECTS  # every message has its own: keeping them is waste
    for _ in range(2):
        with pytest.raises(BadSubjectError):
            publish_now(nc, "wire.bad subject", b"")
    assert "wire.bad subject" not in wire._SUBJECTS


def test_the_cache_of_checked_subjects_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wire, "_SUBJECTS", {})
    monkeypatch.setattr(wire, "_SUBJECTS_LIMIT", 2)
    nc = offline()
    for subject in ("wire.a", "wire.b", "wire.c", "wire.a"):
        publish_now(nc, subject, b"x")
    assert len(wire._SUBJECTS) <= 2
    assert nc._pending == [
        b"PUB wire.a  1\r\nx\r\n",
        b"PUB wire.b  1\r\nx\r\n",
        b"PUB wire.c  1\r\nx\r\n",
        b"PUB wire.a  1\r\nx\r\n",
    ]


@pytest.mark.parametrize(
    ("status", "attributes", "subject", "size", "error"),
    [
        (Client.CLOSED, {}, "a.b", 1, ConnectionClosedError),
        (Client.DRAINING_PUBS, {}, "a.b", 1, ConnectionDrainingError),
        (Client.RECONNECTING, {"_max_pending_size": 10}, "a.b", 11, OutboundBufferLimitError),
        (Client.RECONNECTING, {"_max_pending_size": 0}, "a.b", 1, OutboundBufferLimitError),
        (Client.RECONNECTING, {"_max_pending_size": 100}, "a.b", 10, None),
        (Client.DRAINING_SUBS, {"_max_pending_size": 0}, "a.b", 1, None),
        (Client.CONNECTED, {"_max_payload": 5}, "a.b", 6, MaxPayloadError),
        (Client.CONNECTED, {}, "a b", 1, BadSubjectError),
        (Client.CONNECTED, {}, "a.b\r\nPUB x 1", 1, BadSubjectError),
        (Client.CONNECTED, {}, "", 1, BadSubjectError),
    ],
)
async def test_publish_now_refuses_what_nats_py_refuses(
    status: int, attributes: dict[str, Any], subject: str, size: int, error: type[Exception] | None
) -> None:
    payload = b"x" * size
    if error is None:
        await offline(status, **attributes).publish(subject, payload)
        publish_now(offline(status, **attributes), subject, payload)
        return
    with pytest.raises(error):
        await offline(status, **attributes).publish(subject, payload)
    with pytest.raises(error):
        publish_now(offline(status, **attributes), subject, payload)


async def test_a_burst_of_publishes_wakes_the_flusher_once_and_arrives_in_order(
    ore_nats_client: Client, ore_nats_url: str
) -> None:
    received: list[bytes] = []
    got_all = asyncio.Event()

    async def receive(msg: Msg) -> None:
        received.append(msg.data)
        if len(received) == 100:
            got_all.set()

    await ore_nats_client.subscribe("wire.burst", cb=receive)
    await ore_nats_client.flush()
    sender = OreNatsClient()
    await sender.connect(ore_nats_url)
    try:
        queue = sender._flush_queue
        assert queue is not None
        for index in range(100):
            assert publish_now(sender, "wire.burst", str(index).encode()) is False
        assert queue.qsize() == 1, "one wake-up for the whole burst"
        await asyncio.wait_for(got_all.wait(), 30)
    finally:
        await sender.close()
    assert received == [str(index).encode() for index in range(100)]


async def test_over_the_pending_limit_publish_now_asks_its_caller_to_wait() -> None:
    nc = offline(_max_pending_size=100)
    assert publish_now(nc, "a.b", b"x" * 50) is False
    assert publish_now(nc, "a.b", b"x" * 50) is True


def test_settle_now_acks_once_as_msg_ack_does() -> None:
    nc = offline()
    msg = Msg(_client=nc, subject="ore.in.raw.t1", reply="$JS.ACK.ORE_IN.c.1.1.1.1.0")
    settle_now(nc, msg, Msg.Ack.Progress)
    assert not msg._ackd  # progress leaves it open
    settle_now(nc, msg)
    assert msg._ackd
    with pytest.raises(MsgAlreadyAckdError):
        settle_now(nc, msg)
    assert nc._pending == [
        b"PUB $JS.ACK.ORE_IN.c.1.1.1.1.0  4\r\n+WPI\r\n",
        b"PUB $JS.ACK.ORE_IN.c.1.1.1.1.0  0\r\n\r\n",
    ]
    with pytest.raises(NotJSMessageError):
        settle_now(nc, Msg(_client=nc, subject="core.subject"))
