"""Ingress decoding: a message of `P.inp.<p>.NS.T` into the event it carries, or why not.

The checks of protocol.md ("Rejected input"), in its order: the namespace token, the
thread id, the size, the `Ore-Schema` header, the JSON, and the identity (the payload
may not claim another namespace: the subject is the sender's identity). A failure is a
`Rejected` with its dead-letter reason (`ore_core._nats.codec`) and what to tell the
sender. The `traceparent` header is carried into the event's context.
"""

from __future__ import annotations

from collections.abc import Mapping

from nats.aio.msg import Msg
from pydantic import ValidationError

from ore_core import tracing
from ore_core._nats.codec import (
    BAD_JSON,
    BAD_NAMESPACE,
    BAD_SCHEMA,
    BAD_THREAD_ID,
    IDENTITY,
    INGRESS_SCHEMAS,
    SCHEMA,
    TOO_LARGE,
    UNKNOWN_THREAD,
    redelivered,
)
from ore_core.events import (
    EventContext,
    EventDecodeError,
    IngressEvent,
    UserMessageEvent,
    decode_ingress,
)
from ore_core.ids import is_valid_thread_id
from ore_core.subjects import HEADER_SCHEMA, HEADER_TRACEPARENT, is_valid_namespace

__all__ = ["IngressDecoder", "Rejected", "classify", "unknown_thread", "with_traceparent"]

_NO_CONTEXT = EventContext()
_NAMESPACES_LIMIT = 1024  # valid namespaces remembered (cleared when exceeded)


class Rejected(Exception):
    """This message is bad input with a dead-letter `reason`; `detail` tells the sender."""

    def __init__(self, reason: str, detail: str, context: EventContext = _NO_CONTEXT) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail
        self.context = context


class IngressDecoder:
    """Decodes ingress messages of at most `max_payload` bytes (one per Ingress)."""

    def __init__(self, max_payload: int) -> None:
        self._max_payload = max_payload
        self._namespaces: set[str] = set()  # namespaces found valid (`_check_namespace`)
        self.redelivered = 0
        """Messages decoded that JetStream had delivered before (read by the metrics)."""

    def decode(self, msg: Msg, namespace: str, thread_id: str) -> IngressEvent:
        """The event of `msg`, sent on `namespace`'s subject of `thread_id`; Rejected."""
        if namespace not in self._namespaces:
            self._check_namespace(namespace)
        if not is_valid_thread_id(thread_id):
            raise Rejected(
                BAD_THREAD_ID,
                f"invalid thread id {thread_id[:140]!r}: use 1-128 characters "
                "from A-Z, a-z, 0-9, '_' and '-'",
            )
        if redelivered(msg):
            self.redelivered += 1
        data = msg.data
        if len(data) > self._max_payload:
            raise Rejected(
                TOO_LARGE,
                f"message of {len(data)} bytes is over the limit of {self._max_payload} bytes",
            )
        headers = msg.headers
        if headers:
            schema = headers.get(HEADER_SCHEMA)
            if schema is not None and schema not in INGRESS_SCHEMAS:
                raise Rejected(
                    BAD_SCHEMA, f"unsupported {HEADER_SCHEMA} {schema!r}: this core speaks {SCHEMA}"
                )
        try:
            event = decode_ingress(data)
        except EventDecodeError as exc:
            raise Rejected(classify(exc), str(exc)) from None
        claimed = event.context.provenance
        if claimed != namespace:
            if claimed:
                raise Rejected(
                    IDENTITY,
                    f"context.provenance {claimed[:40]!r} does not match the namespace "
                    f"{namespace!r} this message was sent on: a conduit speaks only for its "
                    "own namespace (leave provenance empty; the core sets it)",
                    event.context.model_copy(update={"provenance": namespace}),
                )
            event = event.with_context(event.context.model_copy(update={"provenance": namespace}))
        event = with_traceparent(event, headers) if headers else event
        if tracing.tracer is not None:
            tracing.received(event, thread_id, headers)
        return event

    def _check_namespace(self, namespace: str) -> None:
        """Refuse an invalid namespace; remember a valid one (a few conduits send all)."""
        if not is_valid_namespace(namespace):
            raise Rejected(
                BAD_NAMESPACE,
                f"invalid namespace {namespace[:40]!r}: use 1-32 characters from a-z, 0-9, "
                "'_' and '-'",
            )
        if len(self._namespaces) >= _NAMESPACES_LIMIT:
            self._namespaces.clear()
        self._namespaces.add(namespace)


def unknown_thread(namespace: str, thread_id: str, event: IngressEvent) -> Rejected:
    """The answer for a thread that does not exist in `namespace` (or is another's)."""
    if isinstance(event, UserMessageEvent):
        hint = "this id is not available: use another thread id, or threads.lookup"
    else:
        hint = f"a {event.kind} needs an existing thread (send a user_message to create one)"
    return Rejected(
        UNKNOWN_THREAD,
        f"thread {thread_id} does not exist in namespace {namespace}: {hint}",
        event.context,
    )


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
