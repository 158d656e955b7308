"""A small OTLP/HTTP trace collector on 127.0.0.1 for the tracing tests.

A real HTTP server (a thread of the test process) that takes what OpenTelemetry's
OTLP/HTTP exporter posts to `/v1/traces`, decodes the protobuf with opentelemetry-proto
and keeps every span with the service that sent it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

__all__ = ["Collector", "ReceivedSpan", "collector"]


@dataclass(frozen=True)
class ReceivedSpan:
    """One exported span, ids in hex (`parent` is "" for a root)."""

    service: str
    name: str
    trace_id: str
    span_id: str
    parent: str
    attributes: dict[str, str]


class Collector:
    """The spans received so far; `wait_for` blocks until a condition on them holds."""

    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.exports = 0
        self._changed = threading.Condition()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        """What `OTEL_EXPORTER_OTLP_ENDPOINT` should be (the exporter adds `/v1/traces`)."""
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def wait_for(self, condition: Callable[[list[ReceivedSpan]], bool], timeout: float) -> bool:
        """True once `condition(spans)` holds; False if it still does not after `timeout`."""
        with self._changed:
            return self._changed.wait_for(lambda: condition(list(self.spans)), timeout)

    def _received(self, body: bytes) -> None:
        request = ExportTraceServiceRequest.FromString(body)
        spans = []
        for resource_spans in request.resource_spans:
            resource = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    spans.append(
                        ReceivedSpan(
                            service=resource.get("service.name", ""),
                            name=span.name,
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent=span.parent_span_id.hex(),
                            attributes={a.key: a.value.string_value for a in span.attributes},
                        )
                    )
        with self._changed:
            self.spans.extend(spans)
            self.exports += 1
            self._changed.notify_all()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.path != "/v1/traces":
                    self.send_error(404)
                    return
                collector._received(body)
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format: str, *args: object) -> None:
                pass  # quiet: the test reads the spans, not the access log

        return Handler

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


@contextmanager
def collector() -> Iterator[Collector]:
    """A running collector, stopped afterwards."""
    running = Collector()
    running.start()
    try:
        yield running
    finally:
        running.stop()
