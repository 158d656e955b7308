"""A tiny HTTP endpoint for orchestrators: `GET /healthz` (alive), `/readyz` (serving)
and, when given a renderer, `/metrics` (Prometheus' text format).

Kubernetes-style probes need only a status code, so this is a stdlib asyncio server
that reads one request line and answers 200 or 503 with a one-line JSON body; no web
framework on the worker for two URLs. A 503 says why (`{"status": "unavailable",
"reason": "task ore-ingress-ack (core/ingress) crashed: ..."}`), so an operator
reading the probe learns what to look for in the log.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from ore_core import jsonutil

__all__ = ["Check", "HealthServer", "Metrics"]

Check = Callable[[], str | None]
"""A probe's question: None when all is well, else the reason it is not (one line)."""

Metrics = tuple[Callable[[], bytes], str]
"""What `/metrics` answers: a renderer of the body, and its content type."""

_REQUEST_TIMEOUT = 5.0
_MAX_REQUEST = 8192


class HealthServer:
    """Answers `/healthz` from `alive()`, `/readyz` from `ready()` and `/metrics` from
    `metrics` (if given); 404 otherwise.

    Each check returns None when the answer is yes, else the reason (see `Check`).
    """

    def __init__(
        self,
        alive: Check,
        ready: Check,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        metrics: Metrics | None = None,
    ) -> None:
        self._checks = {"/healthz": alive, "/readyz": ready}
        self._metrics = metrics
        self._host = host
        self._port = port
        self._server: asyncio.Server | None = None

    @property
    def port(self) -> int:
        """The bound port (useful when constructed with port 0)."""
        if self._server is None:
            return self._port
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self) -> None:
        """Listen on host:port."""
        self._server = await asyncio.start_server(self._serve, self._host, self._port)

    async def stop(self) -> None:
        """Stop listening and close open connections. Idempotent."""
        server, self._server = self._server, None
        if server is not None:
            server.close()
            await server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), _REQUEST_TIMEOUT)
            method, _, rest = head[:_MAX_REQUEST].decode("latin-1").partition(" ")
            path = rest.partition(" ")[0].partition("?")[0]
            check = self._checks.get(path)
            content_type = "application/json"
            body: dict[str, str] | bytes
            if method not in ("GET", "HEAD"):
                status, body = "405 Method Not Allowed", {"status": "method not allowed"}
            elif path == "/metrics" and self._metrics is not None:
                render, content_type = self._metrics
                status, body = "200 OK", render()
            elif check is None:
                status, body = "404 Not Found", {"status": "not found"}
            elif (reason := check()) is None:
                status, body = "200 OK", {"status": "ok"}
            else:
                status = "503 Service Unavailable"
                body = {"status": "unavailable", "reason": reason}
            payload = body if isinstance(body, bytes) else jsonutil.dumps(body)
            writer.write(
                f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n"
                f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n".encode()
                + (payload if method == "GET" else b"")
            )
            await writer.drain()
        except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass  # a probe that does not speak HTTP gets no answer
        except ConnectionError:
            pass
        finally:
            writer.close()
