"""`OreParser` does exactly what nats-py's parser does, with less Python per message.

Random protocol streams, cut at random bytes into reads, go to two `OreNatsClient`s:
one with nats-py's `Parser`, one with `OreParser`. Both must make the same calls
(inline callbacks, ordinary subscriptions' queues, PING/PONG/-ERR/INFO handlers,
`error_cb`), raise the same errors, count the same stats and keep the same unfinished
frame between reads. Then, on a real connection, the work it removes is counted.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.protocol.parser import AWAITING_MSG_PAYLOAD, Parser

from ore_core._nats.connection import OreNatsClient, connect_nats, subscriptions_registered
from ore_core._nats.parser import OreParser

INLINE, FRAGILE, ORDINARY, LIMITED, ORPHAN, UNKNOWN = 1, 2, 3, 4, 5, 9
"""sids: inline; inline that raises (and resets the parser on `reset`); ordinary;
ordinary with max_msgs 2; inline with no subscription left; no subscription at all."""


class _Queue:
    """Stands for an ordinary subscription's queue: records what nats-py puts in it."""

    def __init__(self, calls: list[Any], sid: int) -> None:
        self.calls, self.sid = calls, sid

    def put_nowait(self, msg: Msg) -> None:
        self.calls.append(("queued", self.sid, *_fields(msg)))


def _fields(msg: Msg) -> tuple[Any, ...]:
    return msg.subject, msg.reply, msg.data, msg.headers, msg._sid


def _client(parser: type[Parser], calls: list[Any]) -> OreNatsClient:
    nc = OreNatsClient()
    nc._ps = parser(nc)

    def inline(msg: Msg) -> None:
        calls.append(("inline", *_fields(msg)))
        if msg._sid == FRAGILE and msg.data in (b"boom", b"reset"):
            raise ValueError(msg.data.decode())

    async def on_error(error: Exception) -> None:
        calls.append(("error_cb", type(error).__name__, str(error)))
        if str(error) == "reset":
            nc._ps.reset()

    async def record(*args: Any) -> None:
        calls.append(("handler", *args))

    for sid in (INLINE, FRAGILE, ORDINARY, LIMITED):
        sub = Subscription(nc, sid, "s", max_msgs=2 if sid == LIMITED else 0)
        sub._pending_queue = _Queue(calls, sid)  # type: ignore[assignment]
        nc._subs[sid] = sub
    for sid in (INLINE, FRAGILE, ORPHAN):
        nc._inline[sid] = inline
    nc._error_cb = on_error
    nc._process_ping = lambda: record("ping")  # type: ignore[method-assign]
    nc._process_pong = lambda: record("pong")  # type: ignore[method-assign]
    nc._process_err = lambda err: record("err", err)  # type: ignore[method-assign]
    nc._process_info = lambda info: record("info", info)  # type: ignore[method-assign]
    return nc


async def _feed(parser: type[Parser], reads: list[bytes]) -> list[Any]:
    calls: list[Any] = []
    nc = _client(parser, calls)
    ps = nc._ps
    for data in reads:
        try:
            await ps.parse(data)
        except Exception as error:
            calls.append(("raised", type(error).__name__, str(error)))
            break  # nats-py's read loop stops reading
        # What a finished message leaves in `msg_arg` and `needed` is never read again.
        pending = (dict(ps.msg_arg), ps.needed) if ps.state == AWAITING_MSG_PAYLOAD else None
        calls.append(("left", bytes(ps.buf), ps.state, ps.header_needed, pending))
    received = {sid: sub._received for sid, sub in nc._subs.items()}
    calls.append(("stats", nc.stats["in_msgs"], nc.stats["in_bytes"], received))
    return calls


def _same(reads: list[bytes]) -> None:
    expected = asyncio.run(_feed(Parser, reads))
    assert asyncio.run(_feed(OreParser, reads)) == expected


# -- random streams -------------------------------------------------------------------

_SUBJECTS = st.sampled_from([b"a", b"ore.out.t-1", b"_INBOX.x.y", b"caf\xc3\xa9", b"\xff"])
_SIDS = st.sampled_from([INLINE, FRAGILE, ORDINARY, LIMITED, ORPHAN, UNKNOWN])
_REPLIES = st.sampled_from([b"", b"r", b"$JS.ACK.S.C.1.2.3.4.5", b"7", b"\xfe"])
_PAYLOADS = st.one_of(
    st.sampled_from([b"", b"boom", b"reset", b"x\r\ny", b"MSG a 1 1\r\n"]), st.binary(max_size=40)
)
_BLOCKS = st.one_of(
    st.sampled_from(
        [
            b"NATS/1.0\r\n\r\n",
            b"NATS/1.0\r\nK: v\r\nNats-Last-Sequence: 7\r\n\r\n",
            b"NATS/1.0\r\nOre-Kind:batch\r\nOre-Schema:\t2 \r\n\r\n",
            "NATS/1.0\r\nK: caf\u00e9\r\n\r\n".encode(),
            b"NATS/1.0\r\nBad Name: x\r\nno colon\r\n\r\n",
            b"NATS/1.0 503\r\n\r\n",
            b"NATS/1.0 408 Request Timeout\r\n\r\n",
            b"NATS/1.0 100 Idle Heartbeat\r\nNats-Last-Consumer: 5\r\n\r\n",
            b"NATS/1.0 100 FlowControl Request\r\n\r\n",
            b"NATS/1.0",
            b"NATS/1.0\r\n",
            b"NATS/1.0\r",
            b"12\r\n",
            b"N",
        ]
    ),
    st.binary(max_size=30).map(lambda raw: b"NATS/1.0\r\n" + raw),
    st.binary(max_size=12),
)
_SPACES = st.sampled_from([b" ", b" ", b" ", b"  ", b"\t", b" \t"])


def _framed(draw: st.DrawFn, verb: bytes, sizes: list[bytes], body: bytes) -> bytes:
    """A `verb` line (a subject, a sid, maybe a reply, then `sizes`) with random gaps,
    then `body`."""
    gap = draw(_SPACES)
    reply = draw(_REPLIES)
    sid = str(draw(_SIDS)).encode()
    line = [verb, draw(_SUBJECTS), sid, *([reply] if reply else []), *sizes]
    return gap.join(line) + b"\r\n" + body + b"\r\n"


@st.composite
def _msg(draw: st.DrawFn) -> bytes:
    payload = draw(_PAYLOADS)
    size = str(len(payload) + draw(st.sampled_from([0, 0, 0, -1, 1]))).encode()
    return _framed(draw, b"MSG", [size], payload)


@st.composite
def _hmsg(draw: st.DrawFn) -> bytes:
    block = draw(_BLOCKS)
    payload = draw(_PAYLOADS)
    block_size = len(block) + draw(st.sampled_from([0, 0, 0, -1, 1, 50]))
    size = str(block_size + len(payload) + draw(st.sampled_from([0, 0, 0, 1, -60]))).encode()
    return _framed(draw, b"HMSG", [b"%d" % block_size, size], block + payload)


_OTHER = st.sampled_from(
    [
        b"PING\r\n",
        b"PONG\r\n",
        b"PING \r\n",
        b"+OK\r\n",
        b"-ERR 'Permissions Violation for Publish to \"ore.in\"'\r\n",
        b"-ERR 'Stale Connection'\r\n",
        b"-ERR \r\n",
        b'INFO {"server_id":"x","max_payload":1048576}\r\n',
        b"INFO not json\r\n",
        b"MSG a b 1\r\nx\r\n",
        b"MSG a 010 01\r\nx\r\n",
        b"HMSG a 1 05 012\r\nNATS/1.0\r\n\r\nxx\r\n",
        b"UNKNOWN\r\n",
        b"\r\n",
        b"MSG\r\na 1 1\r\nx\r\n",
    ]
)
_FRAMES = st.one_of(_msg(), _msg(), _hmsg(), _hmsg(), _OTHER, st.binary(max_size=8))


@st.composite
def _reads(draw: st.DrawFn) -> list[bytes]:
    stream = b"".join(draw(st.lists(_FRAMES, max_size=12)))
    cuts = sorted(draw(st.lists(st.integers(0, len(stream)), max_size=6)))
    edges = [0, *cuts, len(stream)]
    return [stream[a:b] for a, b in itertools.pairwise(edges)]


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_reads())
def test_random_streams_in_random_reads_are_handled_exactly_as_nats_py_does(
    reads: list[bytes],
) -> None:
    _same(reads)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from([_msg(), _hmsg()]).flatmap(lambda s: s), max_size=8))
def test_a_stream_read_one_byte_at_a_time_is_handled_as_nats_py_does(
    frames: list[bytes],
) -> None:
    stream = b"".join(frames)
    _same([stream[i : i + 1] for i in range(len(stream))])


@pytest.mark.parametrize(
    "reads",
    [
        [b"MSG a 1 5\r\nhello\r\nMSG a 1 3\r\nbye\r\n"],
        [b"HMSG a 2 r 13 17\r\nNATS/1.0\r\n\r\nboom\r\nMSG a 1 1\r\nx\r\n"],
        [b"HMSG a 2 13 18\r\nNATS/1.0\r\n\r\nreset\r\nMSG a 1 1\r\nx\r\n", b"PING\r\n"],
        [b"HMSG a 1 12 14\r\n13 15\r\nNATS/1.0\r\n\r\n"],  # digits after the line
        [b"MSG a 1 5\r\nhel", b"lo", b"\r\nMSG a 1 1\r\nx\r\n"],
        [b"MSG a 3 70000\r\n" + b"x" * 30000, b"x" * 30000, b"x" * 10000 + b"\r\nPONG\r\n"],
        [b"X" * 5000, b"MSG a 1 1\r\nx\r\n"],
        [b"HMSG a 1 62 2\r\n", b"NATS/1.0\r\n\r\n\r\nMSG a 1 0\r\n\r\n"],  # block > frame
    ],
)
def test_chosen_streams_are_handled_as_nats_py_does(reads: list[bytes]) -> None:
    _same(reads)


# -- on a connection: what nats-py still calls, and the work that is gone ---------------


async def test_a_connection_reads_with_ore_s_parser_and_no_coroutine_per_inline_message(
    ore_nats_url: str, ore_nats_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads: list[bytes] = []
    delegated: list[bytes] = []
    processed: list[int] = []
    fast_parse, slow_parse = OreParser.parse, Parser.parse
    slow_process = OreNatsClient._process_msg

    async def reading(self: OreParser, data: bytes = b"") -> None:
        reads.append(data)
        await fast_parse(self, data)

    async def nats_py_reading(self: Parser, data: bytes = b"") -> None:
        delegated.append(data)
        await slow_parse(self, data)

    async def processing(self: OreNatsClient, sid: int, *args: Any) -> None:
        processed.append(sid)
        await slow_process(self, sid, *args)

    monkeypatch.setattr(OreParser, "parse", reading)
    monkeypatch.setattr(Parser, "parse", nats_py_reading)
    monkeypatch.setattr(OreNatsClient, "_process_msg", processing)
    nc = await connect_nats([ore_nats_url])
    assert isinstance(nc, OreNatsClient)
    assert isinstance(nc._ps, OreParser)
    got: list[tuple[str, bytes, dict[str, str] | None]] = []
    try:
        done = asyncio.Event()

        def record(msg: Msg) -> None:
            got.append((msg.subject, msg.data, msg.headers))
            if len(got) == 20:
                done.set()

        await nc.subscribe_inline("parsed.>", record)
        await subscriptions_registered(nc)
        for index in range(20):
            headers = {"Nats-Msg-Id": f"m-{index}"} if index % 2 else None
            await ore_nats_client.publish(f"parsed.{index}", b"%d" % index, headers=headers)
        await ore_nats_client.flush()
        await asyncio.wait_for(done.wait(), 30)
    finally:
        await nc.close()
    assert got[:2] == [("parsed.0", b"0", None), ("parsed.1", b"1", {"Nats-Msg-Id": "m-1"})]
    assert reads, "nats-py's read loop no longer calls its parser's `parse`"
    assert processed == [], "inline messages are handed over without `_process_msg`"


async def test_after_a_reconnect_the_connection_still_reads_with_ore_s_parser(
    ore_nats_url: str, ore_nats_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    delegated: list[bytes] = []
    slow_parse = Parser.parse

    async def nats_py_reading(self: Parser, data: bytes = b"") -> None:
        delegated.append(data)
        await slow_parse(self, data)

    reconnected = asyncio.Event()

    async def on_reconnect() -> None:
        reconnected.set()

    nc = await connect_nats([ore_nats_url], reconnected_cb=on_reconnect, reconnect_time_wait=0)
    assert isinstance(nc, OreNatsClient)
    got: list[bytes] = []
    try:
        await nc.subscribe_inline("again.>", lambda msg: got.append(msg.data))
        await nc.force_reconnect()
        await asyncio.wait_for(reconnected.wait(), 30)
        assert isinstance(nc._ps, OreParser), "nats-py replaced the parser on reconnect"
        await subscriptions_registered(nc)
        monkeypatch.setattr(Parser, "parse", nats_py_reading)
        await ore_nats_client.publish("again.x", b"after", headers={"K": "v"})
        await ore_nats_client.flush()
        async with asyncio.timeout(30):
            while not got:  # noqa: ASYNC110 - the callback sets no event
                await asyncio.sleep(0.01)
    finally:
        await nc.close()
    assert got == [b"after"]
    assert not any(b"again.x" in data for data in delegated), "read by nats-py's parser"
