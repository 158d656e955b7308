"""OpenTelemetry spans along one message's hops, joined by the `traceparent` it carries.

Optional (`pip install 'ore-core[otel]'`) and off unless configured: `configure` (called
by `ore serve` and `ore conduit`) turns it on when the standard environment names an
OTLP endpoint (`OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`),
and a program of its own turns it on with `enable(tracer_provider)`. This is the one
module that imports OpenTelemetry, and only once tracing is on: until then every hop
costs one check of `tracer`, and none of the span code below runs.

The hops: a conduit's publish (`ore.conduit.publish`) starts the trace, or continues the
one its event carries; the core's ingress (`ore.ingress`) is its child and becomes the
message's parent from then on (the event's `traceparent` is rewritten to it, the trace
id kept, as W3C trace context does at every hop); the stream's handling (`ore.turn`)
and the egress publish of its batch (`ore.egress.publish`) are children of the ingress;
inside the turn, the interceptors, the processor, the model call and the store's save
are children of the span current in the stream's task; the conduit's feed receiving the
stored batch (`ore.conduit.deliver`) is a child of the egress publish, whose span the
batch's `traceparent` header names. Spans carry no message content.
"""

from __future__ import annotations

import os
import re
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any, TypeVar

import structlog

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Span, SpanKind, Tracer

    from ore_core.events import IngressEvent

__all__ = [
    "child",
    "configure",
    "configured",
    "delivered",
    "disable",
    "egress",
    "enable",
    "hop",
    "publishing",
    "received",
    "shutdown",
    "span",
    "tracer",
    "turn",
]

T = TypeVar("T")
E = TypeVar("E", bound="IngressEvent")

log = structlog.get_logger("ore.tracing")

tracer: Tracer | None = None
"""The tracer while tracing is on; None (the hot path's one check) while it is off."""

_provider: TracerProvider | None = None
_ENDPOINTS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")


def configured(environ: Mapping[str, str] = os.environ) -> bool:
    """True when the standard OpenTelemetry environment asks for OTLP traces."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() == "none":
        return False
    return any(environ.get(name, "").strip() for name in _ENDPOINTS)


def configure(service_name: str) -> bool:
    """Turn tracing on from the environment (OTLP over HTTP); True if it is on.

    `service_name` is the default for `OTEL_SERVICE_NAME`. Without the extra installed
    a configured endpoint is a warning, not an error: ore runs on, untraced.
    """
    if tracer is not None or not configured():
        return tracer is not None
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as exc:
        log.warning(
            "OTLP endpoint configured but OpenTelemetry is not installed: "
            "pip install 'ore-core[otel]'; running without traces",
            error=str(exc),
        )
        return False
    name = os.environ.get("OTEL_SERVICE_NAME") or service_name
    provider = TracerProvider(resource=Resource.create({SERVICE_NAME: name}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    enable(provider)
    return True


def enable(provider: TracerProvider) -> None:
    """Trace through `provider` (a program's own, or a test's with an in-memory exporter)."""
    global tracer, _provider
    from ore_core.version import __version__

    _provider = provider
    tracer = provider.get_tracer("ore", __version__)


def disable() -> None:
    """Stop tracing (spans already ended stay with the provider)."""
    global tracer, _provider
    tracer = None
    _provider = None


def shutdown() -> None:
    """Export what is pending and stop (a process's last step; nothing when off)."""
    provider = _provider
    disable()
    if provider is not None:
        provider.shutdown()


# -- the hops (called only while `tracer` is set, but for `child` and `span`) ----------

_TRACEPARENT = re.compile(r"[0-9a-f]{2}-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}")
_REMEMBERED = 4096  # hops whose next hop has not come yet (a message dropped never comes)
_next_parent: dict[str, str] = {}
"""An event id, or the traceparent a message's events carry -> the span its next hop in
this process is a child of (the event itself keeps the traceparent its conduit gave it:
conduits match their answers on it)."""


def _remember(key: str, traceparent: str) -> None:
    if len(_next_parent) >= _REMEMBERED:
        del _next_parent[next(iter(_next_parent))]
    _next_parent[key] = traceparent


def _parent(traceparent: str) -> Context | None:
    """The context of a span named by `traceparent`, sampled: conduits make up their
    traceparents with the flag unset (they record no spans), and a message that reaches
    a traced ore process is traced from there on (its own sampler decides)."""
    found = _TRACEPARENT.fullmatch(traceparent.strip())
    if found is None:
        return None
    from opentelemetry.trace import (
        NonRecordingSpan,
        SpanContext,
        TraceFlags,
        set_span_in_context,
    )

    trace_id, span_id = int(found[1], 16), int(found[2], 16)
    if not trace_id or not span_id:
        return None
    context = SpanContext(
        trace_id, span_id, is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED)
    )
    return set_span_in_context(NonRecordingSpan(context))


def _traceparent(span: Span) -> str:
    context = span.get_span_context()
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"


def _kind(name: str) -> SpanKind:
    from opentelemetry.trace import SpanKind

    return SpanKind[name]


def _attributes(event: IngressEvent, thread_id: str) -> dict[str, str]:
    return {"ore.thread_id": thread_id, "ore.event.id": event.id, "ore.event.kind": event.kind}


def hop(name: str, traceparent: str, kind: str, attributes: Mapping[str, Any]) -> str:
    """A span for a hop that hands a message on at once (a child of `traceparent`, or
    a new trace without one); the `traceparent` that names it, for the next hop."""
    assert tracer is not None
    with tracer.start_as_current_span(
        name, context=_parent(traceparent), kind=_kind(kind), attributes=attributes
    ) as current:
        return _traceparent(current)


async def publishing(event: E, thread_id: str, publish: Callable[[str, E, str], Awaitable[T]]) -> T:
    """A conduit's publish of `event` as the `ore.conduit.publish` span (a child of the
    event's own traceparent): `publish(thread_id, event, traceparent)` sends the span's
    traceparent in the message's header, for the core's ingress."""
    assert tracer is not None
    with tracer.start_as_current_span(
        "ore.conduit.publish",
        context=_parent(event.context.traceparent),
        kind=_kind("PRODUCER"),
        attributes=_attributes(event, thread_id),
    ) as current:
        return await publish(thread_id, event, _traceparent(current))


def received(event: IngressEvent, thread_id: str, headers: Mapping[str, str] | None) -> None:
    """The core's ingress of `event` (`ore.ingress`): a child of the conduit's publish
    (the header's traceparent), else of the event's own."""
    parent = (headers or {}).get("traceparent") or event.context.traceparent
    traceparent = hop("ore.ingress", parent, "CONSUMER", _attributes(event, thread_id))
    _remember(event.id, traceparent)


async def turn(work: Awaitable[T], event: IngressEvent, thread_id: str) -> T:
    """A stream handling `event` as the `ore.turn` span (a child of its ingress), current
    in the stream's task meanwhile, so what the turn does (`child`, `span`) nests below
    it; the egress publish of its events is a child of it too."""
    assert tracer is not None
    own = event.context.traceparent
    parent = _next_parent.pop(event.id, None) or own
    with tracer.start_as_current_span(
        "ore.turn", context=_parent(parent), attributes=_attributes(event, thread_id)
    ) as current:
        if own:
            _remember(own, _traceparent(current))
        return await work


def egress(traceparent: str, subject: str) -> str:
    """The egress publish of a batch of the message carrying `traceparent`
    (`ore.egress.publish`, a child of its turn); the traceparent for the batch's header,
    which the conduit's delivery is a child of."""
    parent = _next_parent.get(traceparent, traceparent)
    return hop("ore.egress.publish", parent, "PRODUCER", {"ore.subject": subject})


def delivered(headers: Mapping[str, str], thread_id: str, sequence: int) -> None:
    """A conduit's feed taking a stored batch for its reader (`ore.conduit.deliver`)."""
    traceparent = headers.get("traceparent")
    if traceparent:  # a batch no traced message caused starts no trace
        attributes = {"ore.thread_id": thread_id, "ore.sequence": sequence}
        hop("ore.conduit.deliver", traceparent, "CONSUMER", attributes)


def child(
    name: str, work: Awaitable[T], attributes: Mapping[str, Any] | None = None
) -> Awaitable[T]:
    """`work` as a span below the current one (nothing when off or outside a trace)."""
    if tracer is None:
        return work
    from opentelemetry.trace import get_current_span

    if not get_current_span().is_recording():
        return work
    return _child(name, work, attributes)


async def _child(name: str, work: Awaitable[T], attributes: Mapping[str, Any] | None) -> T:
    assert tracer is not None
    with tracer.start_as_current_span(name, attributes=attributes):
        return await work


def span(name: str, attributes: Mapping[str, Any] | None = None) -> AbstractContextManager[Any]:
    """A `with` block as a span below the current one (a plugin's own hop, such as the
    model call); a no-op when off or outside a trace. The span is not made current, so
    the block may span an async generator's yields."""
    if tracer is None:
        return nullcontext()
    from opentelemetry.trace import get_current_span

    if not get_current_span().is_recording():
        return nullcontext()
    return tracer.start_span(name, attributes=attributes)
