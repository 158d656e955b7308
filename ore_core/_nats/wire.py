"""Publishing without nats-py's coroutine chain: the same bytes, less Python per message.

nats-py's `publish` is four coroutines deep (`publish`, `_send_publish`,
`_send_command`, `_flush_pending`), rebuilds the header block byte by byte on every
call and creates a future to wake its flusher. The core publishes three messages per
turn (the live run, the stored batch, the ingress ack), so that chain is a tenth of its
CPU. `publish_now` does the same work as one plain function call: the same checks
(closed, draining, the reconnect buffer, the payload limit, the subject), the same
`PUB`/`HPUB` command appended to the connection's pending buffer, and the same flusher
wake-up (the flusher then writes everything pending at once, as before). `header_block`
builds exactly the block nats-py would send for a headers dict (tests compare the two).

One difference, by design: nats-py's `publish` waits for the flusher when the pending
buffer is over `pending_size` (backpressure); a function cannot wait, so `publish_now`
returns True then and an async caller awaits `wait_flushed` (the core's publishers do).

It uses private parts of nats-py, like `OreNatsClient`, and only on one: on any other
client (nats-py's own, which `connect_nats` returns when those parts are missing, see
`ore_core._nats.internals`) every function here takes the public path of
`ore_core._nats.plain` instead, which sends the same messages in the same order through
nats-py's `publish` and `Msg` methods. The tests in tests/_nats/test_wire.py fail if a
nats-py release changes the private parts.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping

from nats.aio.client import Client as NatsClient
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

from ore_core._nats import plain
from ore_core._nats.connection import OreNatsClient

__all__ = [
    "ACK",
    "HEADER_START",
    "header_block",
    "header_value",
    "publish_now",
    "settle_now",
    "wait_flushed",
]

ACK = b""
"""The payload of a JetStream ack (what nats-py's `Msg.ack` sends)."""

# What nats-py checks, spelled as nats-py spells it (tests/_nats/test_wire.py compares).
_HEADER_KEY_RE = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_HEADER_VALUE_NEWLINES = str.maketrans({"\r": " ", "\n": " "})
_SUBJECT_INVALID_RE = re.compile(r"[ \t\r\n]")

_CONNECTED = NatsClient.CONNECTED
_CLOSED = NatsClient.CLOSED
_DRAINING_PUBS = NatsClient.DRAINING_PUBS
_DRAINING_SUBS = NatsClient.DRAINING_SUBS
_HEADER_START = "NATS/1.0\r\n"
HEADER_START = _HEADER_START.encode()
"""The first line of every header block (a caller building a block from parts)."""
_KEYS: dict[str, str | None] = {}  # header name -> its stripped form, None if skipped
_KEYS_LIMIT = 1024
_SUBJECTS: dict[str, bytes] = {}  # subject -> its bytes, once checked (`_subject`)
_SUBJECTS_LIMIT = 4096
_PROGRESS = Msg.Ack.Progress


_kick: list[asyncio.Future[None]] = []  # one finished future (see `_wake_flusher`)


def _key(name: str) -> str | None:
    """`name` as nats-py sends it: stripped, None when skipped; checked, then cached."""
    stripped = name.strip()
    if not stripped:
        key = None  # nats-py skips an empty name
    elif not _HEADER_KEY_RE.fullmatch(stripped):
        raise BadHeaderError(stripped)
    else:
        key = stripped
    if len(_KEYS) < _KEYS_LIMIT:
        _KEYS[name] = key
    return key


def header_block(headers: Mapping[str, str]) -> bytes:
    """The header block nats-py's `publish(headers=headers)` sends, byte for byte.

    Names are stripped (an empty one is skipped, an invalid one raises BadHeaderError),
    values stripped with CR and LF turned into spaces.
    """
    lines = [_HEADER_START]
    keys = _KEYS
    for name, value in headers.items():
        key = keys.get(name, "")
        if key == "":
            key = _key(name)
        if key is None:
            continue
        lines.append(f"{key}: {header_value(value)}\r\n")
    lines.append("\r\n")
    return "".join(lines).encode()


def header_value(value: str) -> str:
    """A header value as nats-py sends it: stripped, CR and LF turned into spaces."""
    value = value.strip()
    if "\r" in value or "\n" in value:
        value = value.translate(_HEADER_VALUE_NEWLINES)
    return value


def publish_now(
    nc: NatsClient,
    subject: str,
    payload: bytes,
    reply: str = "",
    header: bytes = b"",
    wake: bool = True,
) -> bool:
    """Queue one message on `nc` as `nc.publish` does, without awaiting anything.

    `header` is a `header_block` (empty: a message without headers). Raises what
    `nc.publish` raises for the same message. True when the pending buffer is over its
    limit: an async caller should then `await wait_flushed(nc)` (nats-py's backpressure).
    `wake=False` leaves the message pending until the next write (or `wake_flusher`).
    """
    try:
        encoded = _SUBJECTS[subject]
    except KeyError:
        encoded = _subject(subject)
    if reply and _SUBJECT_INVALID_RE.search(reply):
        raise BadSubjectError
    if not isinstance(nc, OreNatsClient):
        return plain.publish(nc, subject, payload, reply, header)
    size = len(payload)
    if nc._status != _CONNECTED or size > nc._max_payload:
        _refuse(nc, size)
    if header:
        length = len(header)
        command = b"HPUB %b %b %d %d\r\n%b%b\r\n" % (
            encoded,
            reply.encode(),
            length,
            length + size,
            header,
            payload,
        )
    else:
        command = b"PUB %b %b %d\r\n%b\r\n" % (encoded, reply.encode(), size, payload)
    return _append(nc, command, size, wake)


def _subject(subject: str) -> bytes:
    """`subject` as sent, checked as nats-py checks it (BadSubjectError), then cached."""
    if not subject or _SUBJECT_INVALID_RE.search(subject):
        raise BadSubjectError
    encoded = subject.encode()
    if len(_SUBJECTS) >= _SUBJECTS_LIMIT:
        _SUBJECTS.clear()  # the subjects of threads gone quiet go; busy ones come back
    _SUBJECTS[subject] = encoded
    return encoded


def _refuse(nc: NatsClient, size: int) -> None:
    """Raise what nats-py's `publish` raises for the state of `nc` and a `size` bytes
    payload, in its order (nothing while reconnecting with room in the buffer)."""
    status = nc._status
    if status == _CLOSED:
        raise ConnectionClosedError
    if status == _DRAINING_PUBS:
        raise ConnectionDrainingError
    if status not in (_CONNECTED, _DRAINING_SUBS) and (
        nc._max_pending_size <= 0 or size + nc._pending_data_size > nc._max_pending_size
    ):
        raise OutboundBufferLimitError  # reconnecting, and the buffer is full
    if size > nc._max_payload:
        raise MaxPayloadError


def _append(nc: NatsClient, command: bytes, size: int, wake: bool) -> bool:
    """Add `command` (of a `size` bytes payload) to the pending buffer, as nats-py does."""
    stats = nc.stats
    stats["out_msgs"] += 1
    stats["out_bytes"] += size
    nc._pending.append(command)
    nc._pending_data_size += len(command)
    if wake:
        wake_flusher(nc)
    return 0 < nc._max_pending_size < nc._pending_data_size


def wake_flusher(nc: NatsClient) -> None:
    """Have the flusher write what is pending (what `publish_now(..., wake=False)` left)."""
    if not isinstance(nc, OreNatsClient):
        return  # the plain path sends at once
    queue = nc._flush_queue
    if queue is not None and queue.empty():
        _wake_flusher(nc, queue)


def _wake_flusher(nc: NatsClient, queue: asyncio.Queue[asyncio.Future[None]]) -> None:
    """Wake the flusher, as nats-py's `_flush_pending` does.

    The flusher resolves the future it is woken with unless it is done already; nobody
    awaits the ones handed over here, so one finished future serves every wake-up.
    """
    if not nc.is_connected:
        return  # nats-py does not wake it either: the reconnect writes the buffer
    flusher = nc._flusher_task
    transport = nc._transport
    if (flusher is None or flusher.done()) and transport is not None:
        transport.writelines(nc._pending[:])  # as nats-py does when its flusher is gone
        nc._pending = []
        nc._pending_data_size = 0
        return
    if not _kick:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        _kick.append(done)
    queue.put_nowait(_kick[0])


async def wait_flushed(nc: NatsClient) -> None:
    """Wait until the flusher wrote what is pending (after `publish_now` returned True)."""
    if not isinstance(nc, OreNatsClient):
        await plain.flushed(nc)
        return
    await nc._flush_pending(force_flush=True)


def settle_now(nc: NatsClient, msg: Msg, payload: bytes = ACK, wake: bool = True) -> bool:
    """Ack (or nak, `+WPI`...) a JetStream message at once, as `msg.ack()` does.

    Raises what `msg.ack()` raises (no reply subject, already acknowledged) and what
    `publish_now` raises; marks the message acknowledged except for a progress ack.
    Returns `publish_now`'s answer. The ack subject is checked here, not through
    `publish_now`'s cache: every message has its own, used once.
    """
    reply = msg.reply
    if not reply:
        raise NotJSMessageError
    if not isinstance(nc, OreNatsClient):
        return plain.settle(nc, msg, payload)
    progress = payload == _PROGRESS
    if msg._ackd and not progress:
        raise MsgAlreadyAckdError(msg)
    if _SUBJECT_INVALID_RE.search(reply):
        raise BadSubjectError
    size = len(payload)
    if nc._status != _CONNECTED or size > nc._max_payload:
        _refuse(nc, size)
    over = _append(nc, b"PUB %b  %d\r\n%b\r\n" % (reply.encode(), size, payload), size, wake)
    if not progress:
        msg._ackd = True
    return over
