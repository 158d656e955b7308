"""Bus messages <-> events: the headers around the one JSON serialisation of each event.

Output messages carry `Ore-Kind`, `Ore-Schema` and, when the turn has one, the W3C
`traceparent`, so subscribers can route without parsing. Ingress bytes are decoded
by `ore_core.events.decode_ingress`; `classify` turns its failure into the
dead-letter reason of protocol.md ("Rejected input").
"""

from __future__ import annotations

from collections.abc import Mapping

from nats.aio.msg import _V1_TOKEN_COUNT, _V2_TOKEN_COUNT, Msg
from pydantic import ValidationError

from ore_core.events import EventContext, EventDecodeError, IngressEvent, OutputEvent
from ore_core.subjects import HEADER_KIND, HEADER_SCHEMA, HEADER_TRACEPARENT, SCHEMA_VERSION

__all__ = [
    "BAD_JSON",
    "BAD_NAMESPACE",
    "BAD_SCHEMA",
    "BAD_THREAD_ID",
    "IDENTITY",
    "INGRESS_SCHEMAS",
    "SCHEMA",
    "TOO_LARGE",
    "UNKNOWN_THREAD",
    "classify",
    "output_headers",
    "stream_sequence",
    "with_traceparent",
]

SCHEMA = str(SCHEMA_VERSION)
INGRESS_SCHEMAS = frozenset({"1", SCHEMA})
"""`Ore-Schema` values accepted on ingress (its events did not change in version 2)."""

BAD_JSON = "bad_json"
BAD_SCHEMA = "bad_schema"
BAD_THREAD_ID = "bad_thread_id"
BAD_NAMESPACE = "bad_namespace"
IDENTITY = "identity"
UNKNOWN_THREAD = "unknown_thread"
TOO_LARGE = "too_large"

_NO_CONTEXT = EventContext()


def output_headers(event: OutputEvent) -> dict[str, str]:
    """The headers of an output event's message (a fresh dict: nats-py may keep it)."""
    headers = {HEADER_KIND: event.kind, HEADER_SCHEMA: SCHEMA}
    traceparent = getattr(event, "context", _NO_CONTEXT).traceparent
    if traceparent:
        headers[HEADER_TRACEPARENT] = traceparent
    return headers


def stream_sequence(msg: Msg) -> int:
    """The stream sequence of a JetStream message, read from its ack subject.

    What `msg.metadata.sequence.stream` gives, without building the rest of the
    metadata (a datetime and six more fields) for every message; anything but an
    ack subject goes to nats-py, which raises its error.
    """
    tokens = (msg.reply or "").split(".")
    if tokens[0] == "$JS" and len(tokens) > 1 and tokens[1] == "ACK":
        if len(tokens) == _V1_TOKEN_COUNT:
            return int(tokens[5])
        if len(tokens) >= _V2_TOKEN_COUNT - 1:
            return int(tokens[Msg.Ack.StreamSeq])
    return msg.metadata.sequence.stream


def with_traceparent(event: IngressEvent, headers: Mapping[str, str] | None) -> IngressEvent:
    """`event` carrying the `traceparent` header in its context, unless it has its own.

    The stream copies the ingress context onto every output event of the turn, so this
    is how a trace started by a conduit reaches all of the turn's messages.
    """
    traceparent = headers.get(HEADER_TRACEPARENT) if headers else None
    if not traceparent or event.context.traceparent:
        return event
    return event.with_context(event.context.model_copy(update={"traceparent": traceparent}))


def classify(error: EventDecodeError) -> str:
    """`bad_json` when the bytes are not JSON at all, else `bad_schema`."""
    cause = error.__cause__
    if isinstance(cause, ValidationError) and any(
        problem["type"] == "json_invalid" for problem in cause.errors(include_url=False)
    ):
        return BAD_JSON
    return BAD_SCHEMA
