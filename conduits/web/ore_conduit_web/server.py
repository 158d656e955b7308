"""Serving the app: bind the address (or a free port when it is taken), run uvicorn.

uvicorn runs inside the conduit's task, on its loop, without its own signal handlers:
`ore conduit` owns SIGTERM and SIGINT and cancels the conduit, which stops the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import socket
from collections.abc import Iterator

import structlog
import uvicorn
from fastapi import FastAPI

from ore_core.errors import OreError

__all__ = ["bind", "serve", "url_of"]

log = structlog.get_logger("ore.web.server")


def bind(host: str, port: int, *, fallback: bool = True) -> tuple[socket.socket, str | None]:
    """A listening socket on (host, port), or on a free port when that one is taken:
    the socket and, in that case, a sentence saying so. Without `fallback` (a port the
    user chose: a promise) a taken port is an OreError of one line."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    note = None
    try:
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE or port == 0:
                raise
            if not fallback:
                sock.close()
                raise OreError(
                    f"web conduit: port {port} is taken: stop what listens there, or choose "
                    "another port (--port, or port in [plugins.web]; 0: any free port)"
                ) from None
            sock.bind((host, 0))
            note = f"port {port} is taken; serving on port {sock.getsockname()[1]} instead"
        sock.listen(128)
        sock.setblocking(False)
    except OSError as exc:
        sock.close()
        raise OreError(f"web conduit: cannot listen on {host}:{port}: {exc}") from exc
    return sock, note


def url_of(sock: socket.socket) -> str:
    """The http URL a browser on this machine uses for the socket."""
    host, port = sock.getsockname()[:2]
    if host in ("0.0.0.0", "::"):
        host = "127.0.0.1"
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield  # `ore conduit` handles the signals


async def serve(app: FastAPI, sock: socket.socket) -> None:
    """Serve `app` on `sock` until cancelled; then stop accepting and close connections."""
    config = uvicorn.Config(
        app, log_level="warning", lifespan="off", timeout_graceful_shutdown=2, access_log=False
    )
    server = _Server(config)
    task = asyncio.ensure_future(server.serve(sockets=[sock]))
    try:
        await asyncio.shield(task)
    finally:
        server.should_exit = True
        await task
        sock.close()
