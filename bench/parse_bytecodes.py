"""Python bytecodes per received message: nats-py's parser against `OreParser`.

Run: `python bench/parse_bytecodes.py [--messages 200]`. Feeds one `OreNatsClient`
reads of what a conduit and the core receive in a turn (a republished batch with
eight headers, a live delta, a publish ack), to an inline subscription, and counts
the bytecodes from the read to the callback's return (the callback itself excluded),
with each parser in turn, in one process. Counting, not timing (see bench/bytecodes.py).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from types import FrameType
from typing import Any

from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.protocol.parser import Parser

from ore_core._nats.connection import OreNatsClient
from ore_core._nats.parser import OreParser

_BATCH_HEADERS = (
    b"NATS/1.0\r\nNats-Stream: ORE_EVENTS\r\nNats-Subject: ore.out.slack.t-1\r\n"
    b"Nats-Sequence: 41\r\nNats-Time-Stamp: 2026-12-01T19:00:00.000000000Z\r\n"
    b"Nats-Last-Sequence: 40\r\nOre-Kind: batch\r\nOre-Schema: 2\r\nOre-Seq: 7\r\n\r\n"
)
_BATCH = b'[{"kind":"text","content":"hello"},{"kind":"lifecycle","phase":"done"}]'
_DELTA = b'{"kind":"text_delta","content":"hel"}'
_ACK = b'{"stream":"ORE_IN","seq":41}'


def _hmsg(subject: bytes, sid: int, block: bytes, payload: bytes) -> bytes:
    sizes = b"%d %d" % (len(block), len(block) + len(payload))
    return b"HMSG %s %d %s\r\n%s%s\r\n" % (subject, sid, sizes, block, payload)


def _turn() -> bytes:
    """One turn's messages to one connection, as one read."""
    return (
        _hmsg(b"ore.out.slack.t-1", 1, _BATCH_HEADERS, _BATCH)
        + _hmsg(b"ore.out.slack.t-1", 1, b"NATS/1.0\r\nOre-Kind: text_delta\r\n\r\n", _DELTA)
        + b"MSG _INBOX.acks.1 1 %d\r\n%s\r\n" % (len(_ACK), _ACK)
    )


def count(parser: type[Parser], turns: int) -> int:
    """Bytecodes to parse and deliver `turns` turns' reads (callback excluded)."""
    nc = OreNatsClient()
    nc._ps = parser(nc)
    received: list[Msg] = []
    nc._inline[1] = received.append
    nc._subs[1] = Subscription(nc, 1, "ore.out.>")
    reads = [_turn() for _ in range(turns)]
    counted = 0

    def trace(frame: FrameType, event: str, arg: Any) -> Any:
        nonlocal counted
        if event == "call":
            frame.f_trace_opcodes = True
        elif event == "opcode":
            counted += 1
        return trace

    async def feed() -> None:
        sys.settrace(trace)
        try:
            for data in reads:
                await nc._ps.parse(data)
        finally:
            sys.settrace(None)

    asyncio.run(feed())
    assert len(received) == 3 * turns
    return counted


def main() -> None:
    """Print bytecodes per message for both parsers."""
    cli = argparse.ArgumentParser()
    cli.add_argument("--messages", type=int, default=300, help="messages (3 per turn)")
    turns = cli.parse_args().messages // 3
    for parser in (Parser, OreParser):
        per_message = count(parser, turns) / (3 * turns)
        print(f"{parser.__module__}.{parser.__name__}: {per_message:.0f} bytecodes per message")


if __name__ == "__main__":
    main()
