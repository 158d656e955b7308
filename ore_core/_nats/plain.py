"""The public path of `ore_core._nats.wire`: nats-py's own `publish` and `Msg` methods.

Taken on any client but an `OreNatsClient`, in particular when `connect_nats` found
nats-py's private names missing (`ore_core._nats.internals`). `wire`'s functions are
plain calls that must not await, and nats-py's are coroutines: each connection gets an
outbox, a queue of sends that one task of its own awaits in order, so messages leave
in the order they were queued, as on the private path. The refusals nats-py's public
state can tell (closed, draining, too large) are raised at once as there; one that
only nats-py's `publish` can tell (reconnecting with a full buffer) is logged when the
outbox meets it, and the message is lost as a core-NATS publish then is (a JetStream
publish gets no ack and is sent again by its publisher). Slower than the private path,
never different on the wire.
"""

from __future__ import annotations

import asyncio
import functools
import weakref
from collections import deque
from collections.abc import Awaitable, Callable

import structlog
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.errors import (
    ConnectionClosedError,
    ConnectionDrainingError,
    MaxPayloadError,
    MsgAlreadyAckdError,
)
from nats.errors import Error as NatsError

__all__ = ["flushed", "headers_of", "publish", "settle"]

log = structlog.get_logger("ore.nats")

_OUTBOX_LIMIT = 1024
"""Queued sends past which `publish` asks its caller to wait (`flushed`)."""

_HEADER_START = b"NATS/1.0\r\n"


class _Outbox:
    """One connection's sends, awaited in order by one task that ends when it is empty."""

    def __init__(self, nc: NatsClient) -> None:
        self._nc = nc
        self._sends: deque[Callable[[], Awaitable[object]]] = deque()
        self._task: asyncio.Task[None] | None = None

    def put(self, send: Callable[[], Awaitable[object]]) -> bool:
        """Queue `send`; True when the caller should await `flushed`."""
        self._sends.append(send)
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._drain())
        return len(self._sends) > _OUTBOX_LIMIT

    async def wait(self) -> None:
        """Return once everything queued so far was handed to nats-py."""
        while self._task is not None:
            await asyncio.shield(self._task)

    async def _drain(self) -> None:
        try:
            while self._sends:
                send = self._sends.popleft()
                try:
                    await send()
                except NatsError as exc:
                    log.warning("message not sent", error=repr(exc))
                except Exception:  # the outbox must go on: the next send is another's
                    log.exception("sending a message failed")
        finally:
            self._task = None


_outboxes: weakref.WeakKeyDictionary[NatsClient, _Outbox] = weakref.WeakKeyDictionary()


def _outbox(nc: NatsClient) -> _Outbox:
    outbox = _outboxes.get(nc)
    if outbox is None:
        outbox = _outboxes[nc] = _Outbox(nc)
    return outbox


def headers_of(header: bytes) -> dict[str, str] | None:
    """The headers dict a `wire.header_block` was built from (None for no block)."""
    if not header:
        return None
    lines = header[len(_HEADER_START) : -2].decode().split("\r\n")
    return dict(line.split(": ", 1) for line in lines if line)


def publish(nc: NatsClient, subject: str, payload: bytes, reply: str, header: bytes) -> bool:
    """Queue `nc.publish(...)` for this message (subject and reply already checked)."""
    if nc.is_closed:
        raise ConnectionClosedError
    if nc.is_draining_pubs:
        raise ConnectionDrainingError
    if len(payload) > nc.max_payload:
        raise MaxPayloadError
    headers = headers_of(header)
    return _outbox(nc).put(lambda: nc.publish(subject, payload, reply=reply, headers=headers))


def settle(nc: NatsClient, msg: Msg, payload: bytes) -> bool:
    """Queue the `Msg` method that sends `payload` (an ack, `+WPI`, `-NAK`, ...) on
    `nc`'s outbox; raises at once for a message acknowledged already, as `msg.ack`."""
    if nc.is_closed:
        raise ConnectionClosedError
    if payload == Msg.Ack.Progress:
        return _outbox(nc).put(msg.in_progress)
    if msg.is_acked:
        raise MsgAlreadyAckdError(msg)
    send = _SETTLE.get(payload)
    if send is not None:
        return _outbox(nc).put(functools.partial(send, msg))
    reply = msg.reply
    return _outbox(nc).put(lambda: nc.publish(reply, payload))


_SETTLE: dict[bytes, Callable[[Msg], Awaitable[None]]] = {
    b"": Msg.ack,  # what nats-py's `ack` sends: an empty payload
    Msg.Ack.Nak: Msg.nak,
    Msg.Ack.Term: Msg.term,
}


async def flushed(nc: NatsClient) -> None:
    """Wait until `nc`'s outbox handed everything to nats-py."""
    outbox = _outboxes.get(nc)
    if outbox is not None:
        await outbox.wait()
