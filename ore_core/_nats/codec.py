"""The wire codec: every byte ore puts on NATS around an event's JSON, and what it reads back.

An event's own JSON is `ore_core.events`' (`encode_event`, `decode_ingress`); the
subjects are `ore_core.subjects`' (which also names the headers). Everything else ore
writes or parses on the wire is here, for the conduit SDK and the core alike:

- the schema (`SCHEMA`, sent as `Ore-Schema`; `INGRESS_SCHEMAS`, what ingress accepts);
- the header blocks: a conduit's ingress message (`ingress_block`: `Nats-Msg-Id`,
  `Ore-Kind`, `Ore-Schema`, `traceparent`), the core's live and stored output
  (`output_headers`, `output_block`, with `Ore-Last-Turn` on stored batches), a fenced
  append (`open_block`, `fenced_block`: `Nats-Msg-Id`, then
  `Nats-Expected-Last-Subject-Sequence`), a dead-letter record (`dead_letter`);
- JetStream's answers: a publish ack (`read_publish_ack`), a message's stream sequence
  (`stream_sequence`);
- the namespace a thread belongs to (`namespace_of`), which picks its subjects.

It sits in `ore_core._nats`, below both the SDK and `bus/` (docs/architecture.md, "The floors":
the SDK imports nothing of bus/), beside the transport that sends these bytes. Header blocks
are encoded by `wire.header_block`, byte for byte what nats-py would send.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from nats.aio.msg import Msg
from nats.js.errors import APIError, NoStreamResponseError

from ore_core import jsonutil
from ore_core._nats.wire import HEADER_START, header_block, header_value
from ore_core.errors import BusError
from ore_core.subjects import (
    DEFAULT_NAMESPACE,
    HEADER_EXPECTED_LAST_SUBJECT_SEQUENCE,
    HEADER_KIND,
    HEADER_LAST_SEQUENCE,
    HEADER_LAST_TURN,
    HEADER_MSG_ID,
    HEADER_SCHEMA,
    HEADER_SEQUENCE,
    HEADER_TRACEPARENT,
    NAMESPACE_KEY,
    SCHEMA_VERSION,
)

if TYPE_CHECKING:
    from ore_core.events import OutputEvent

__all__ = [
    "BAD_JSON",
    "BAD_NAMESPACE",
    "BAD_SCHEMA",
    "BAD_THREAD_ID",
    "CORRUPT_THREAD",
    "DEAD_LETTER_LIMIT",
    "IDENTITY",
    "INGRESS_SCHEMAS",
    "SCHEMA",
    "TOO_LARGE",
    "UNKNOWN_THREAD",
    "Ack",
    "batch_block",
    "dead_letter",
    "fenced_block",
    "ingress_block",
    "namespace_of",
    "open_block",
    "output_block",
    "output_headers",
    "read_publish_ack",
    "republished_block",
    "stored_copy_block",
    "stream_sequence",
    "redelivered",
    "delivery_sequence",
]

SCHEMA = str(SCHEMA_VERSION)
"""The `Ore-Schema` of every message ore writes."""
INGRESS_SCHEMAS = frozenset({"1", SCHEMA})
"""`Ore-Schema` values accepted on ingress (its events did not change in version 2)."""

# Dead-letter reasons (protocol.md "Rejected input"): the last token of `P.dlq.REASON`.
BAD_JSON = "bad_json"
BAD_SCHEMA = "bad_schema"
BAD_THREAD_ID = "bad_thread_id"
BAD_NAMESPACE = "bad_namespace"
IDENTITY = "identity"
UNKNOWN_THREAD = "unknown_thread"
TOO_LARGE = "too_large"
CORRUPT_THREAD = "corrupt_thread"
"""Dead-letter reason of a message whose stored thread cannot be decoded."""

DEAD_LETTER_LIMIT = 64 * 1024
"""Bytes of a rejected payload kept in its dead-letter record (the rest is cut)."""

_SAFE_VALUE = re.compile(r"[!-~]{1,128}")  # a header value ore names a turn by: printable
_BATCH = "batch"  # `ore_core.events.BATCH_KIND`, not imported: the SDK loads events lazily


# -- headers ------------------------------------------------------------------------


def _lines(headers: dict[str, str]) -> bytes:
    """The `Name: value` lines of `header_block(headers)` (no first or last line)."""
    return header_block(headers)[len(HEADER_START) : -2]


_KIND_LINES: dict[str, bytes] = {}  # kind -> its `Ore-Kind` and `Ore-Schema` lines
_MSG_ID_HEAD = HEADER_START + HEADER_MSG_ID.encode() + b": "


def ingress_block(kind: str, msg_id: str, traceparent: str = "") -> bytes:
    """The header block of a conduit's ingress message (one per send: the kind's lines
    are encoded once)."""
    lines = _KIND_LINES.get(kind)
    if lines is None:
        lines = _KIND_LINES[kind] = _lines({HEADER_KIND: kind, HEADER_SCHEMA: SCHEMA})
    header = _MSG_ID_HEAD + header_value(msg_id).encode() + b"\r\n" + lines
    if traceparent:
        header += _lines({HEADER_TRACEPARENT: traceparent})
    return header + b"\r\n"


def output_headers(event: OutputEvent) -> dict[str, str]:
    """The headers of an output event's own message (a fresh dict: nats-py may keep it)."""
    context = getattr(event, "context", None)
    return _output_headers(event.kind, context.traceparent if context is not None else "")


def _output_headers(kind: str, traceparent: str, last_turn: str = "") -> dict[str, str]:
    headers = {HEADER_KIND: kind, HEADER_SCHEMA: SCHEMA}
    if traceparent:
        headers[HEADER_TRACEPARENT] = traceparent
    if last_turn and _SAFE_VALUE.fullmatch(last_turn):
        headers[HEADER_LAST_TURN] = last_turn
    return headers


_OUTPUT_BLOCKS: dict[str, bytes] = {}  # kind -> its block without a trace or last turn


def output_block(kind: str, traceparent: str = "", last_turn: str | None = None) -> bytes:
    """The header block of an output message of `kind` (`batch` for several events).

    `last_turn` (a stored batch without turns: the last turn stored before it) is left
    out unless it is a safe header value (printable ASCII, at most 128).
    """
    if not traceparent and not last_turn:
        block = _OUTPUT_BLOCKS.get(kind)
        if block is None:
            block = _OUTPUT_BLOCKS[kind] = header_block(_output_headers(kind, ""))
        return block
    return header_block(_output_headers(kind, traceparent, last_turn or ""))


def batch_block(traceparent: str = "", last_turn: str | None = None) -> bytes:
    """`output_block` of a batch (several events in one message)."""
    return output_block(_BATCH, traceparent, last_turn)


_MSG_ID_LINE = f"{HEADER_MSG_ID}: ".encode()
_EXPECTED_LINE = f"{HEADER_EXPECTED_LAST_SUBJECT_SEQUENCE}: ".encode()


def open_block(block: bytes, msg_id: str) -> bytes:
    """`block` (a `header_block`) with a `Nats-Msg-Id` line, left open for
    `fenced_block`."""
    return b"%s%s%s\r\n" % (block[:-2], _MSG_ID_LINE, msg_id.encode())


def fenced_block(head: bytes, sequence: int) -> bytes:
    """An `open_block` closed with `Nats-Expected-Last-Subject-Sequence: sequence`."""
    return b"%s%s%d\r\n\r\n" % (head, _EXPECTED_LINE, sequence)


_SEQUENCE_LINE = f"{HEADER_SEQUENCE}: ".encode()
_LAST_SEQUENCE_LINE = f"{HEADER_LAST_SEQUENCE}: ".encode()


def republished_block(head: bytes, sequence: int, previous: int) -> bytes:
    """An open header block (`open_block`, or a block without its closing line) closed
    with the sequences the server's RePublish carries: a stored batch copied to a
    linked namespace reads exactly like the republished one (issue 29)."""
    return b"%s%s%d\r\n%s%d\r\n\r\n" % (
        head,
        _SEQUENCE_LINE,
        sequence,
        _LAST_SEQUENCE_LINE,
        previous,
    )


def stored_copy_block(headers: dict[str, str], sequence: int, previous: int) -> bytes:
    """`republished_block` of a stored message's own headers (its `Nats-*` left out)."""
    own = {name: value for name, value in headers.items() if not name.startswith("Nats-")}
    return republished_block(header_block(own)[:-2], sequence, previous)


# -- dead letters -------------------------------------------------------------------


def dead_letter(
    reason: str, detail: str, subject: str, namespace: str, thread_id: str, data: bytes
) -> tuple[bytes, dict[str, str]]:
    """The JSON record and the headers of a rejected message's `P.dlq.REASON` entry."""
    record: dict[str, object] = {
        "reason": reason,
        "detail": detail,
        "subject": subject,
        "namespace": namespace,
        "thread_id": thread_id,
        "data": data[:DEAD_LETTER_LIMIT].decode("utf-8", errors="replace"),
        "time": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
    }
    if len(data) > DEAD_LETTER_LIMIT:
        record["truncated"] = True
    return jsonutil.dumps(record), {HEADER_SCHEMA: SCHEMA}


# -- JetStream's answers ------------------------------------------------------------


class Ack(NamedTuple):
    """What JetStream answered to a publish: the stored sequence, and whether it was a
    duplicate (the `Nats-Msg-Id` was already stored inside the duplicate window).

    A named tuple: immutable like a frozen dataclass, made in a third of the time.
    """

    sequence: int
    duplicate: bool


_NO_RESPONDERS = "503"


def read_publish_ack(msg: Msg) -> Ack:
    """JetStream's answer to a publish, or what it refused.

    Raises NoStreamResponseError when no stream answered (an empty 503 status reply),
    the APIError subclass of JetStream's error code when it refused the message (its
    `code`, `err_code` and `description` say why), and BusError for anything unreadable.
    """
    data = msg.data
    if not data:
        headers = msg.headers
        if headers and headers.get("Status") == _NO_RESPONDERS:
            raise NoStreamResponseError
        raise BusError(f"JetStream answered a publish with no data (headers {headers})")
    try:
        reply = jsonutil.loads(data)
    except ValueError as exc:
        raise BusError(f"JetStream answered a publish with {data[:200]!r}") from exc
    if not isinstance(reply, dict):
        raise BusError(f"JetStream answered a publish with {data[:200]!r}")
    error = reply.get("error")
    if isinstance(error, dict):
        known = {key: error.get(key) for key in ("code", "description", "err_code")}
        APIError.from_error(known)  # raises the APIError subclass of the error's code
    sequence = reply.get("seq")
    if not isinstance(sequence, int):
        raise BusError(f"JetStream answered a publish with {data[:200]!r}")
    return Ack(sequence, reply.get("duplicate") is True)


def stream_sequence(msg: Msg) -> int:
    """The stream sequence of a JetStream message, read from its ack subject.

    What `msg.metadata.sequence.stream` gives, without building the rest of the
    metadata (a datetime and six more fields) for every message; anything but an
    ack subject goes to nats-py, which raises its error. The token positions are
    nats-py's (`_V1_TOKEN_COUNT`, `_V2_TOKEN_COUNT` and `Msg.Ack.StreamSeq`: 9 tokens
    in the old form, 11 or 12 in the new; checked by `ore_core._nats.internals`).
    """
    tokens = (msg.reply or "").split(".")
    if tokens[0] == "$JS" and len(tokens) > 1 and tokens[1] == "ACK":
        if len(tokens) == _V1_TOKENS:
            return int(tokens[5])
        if len(tokens) >= _V2_TOKENS - 1:
            return int(tokens[Msg.Ack.StreamSeq])
    return msg.metadata.sequence.stream


def delivery_sequence(msg: Msg) -> int | None:
    """The consumer's sequence of this delivery (`metadata.sequence.consumer`: one more
    for every message the consumer sends, redeliveries too), read from the ack subject;
    None for a reply that is no ack subject. A jump means a delivery never arrived."""
    tokens = (msg.reply or "").split(".")
    count = len(tokens)
    if count == _V1_TOKENS:
        return int(tokens[6])
    if count >= _V2_TOKENS - 1:
        return int(tokens[Msg.Ack.ConsumerSeq])
    return None


def redelivered(msg: Msg) -> bool:
    """True when JetStream delivered `msg` before: its ack subject's delivery count (the
    token nats-py reads as `metadata.num_delivered`) is not 1. Once per ingress message,
    so no int and no metadata object; False for a reply that is no ack subject."""
    tokens = (msg.reply or "").split(".")
    count = len(tokens)
    if count == _V1_TOKENS:
        return tokens[4] != "1"
    return count >= _V2_TOKENS - 1 and tokens[Msg.Ack.NumDelivered] != "1"


_V1_TOKENS = 9
_V2_TOKENS = 12


# -- namespaces ---------------------------------------------------------------------


class _Meta(Protocol):
    def get(self, key: str) -> Any: ...


class _Thread(Protocol):
    def meta(self) -> _Meta: ...


def namespace_of(thread: _Thread) -> str:
    """The namespace a thread was created in (`DEFAULT_NAMESPACE` if it records none)."""
    return thread.meta().get(NAMESPACE_KEY) or DEFAULT_NAMESPACE
