"""`ore serve`'s choice of port: a port left in TIME-WAIT by a stopped server is free."""

from __future__ import annotations

import socket
from pathlib import Path

from ore_core.bus.server.embedded import EmbeddedNatsServer
from ore_core.cli.serve import _embedded_port


def _port_in_time_wait() -> int:
    """A loopback port whose only socket is in TIME-WAIT (the server side closed first,
    as a stopped server does with its connected clients)."""
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port: int = listener.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port)) as client:
            accepted, _ = listener.accept()
            accepted.close()  # the active close: this side waits in TIME-WAIT
            assert client.recv(1) == b""
    return port


def test_a_port_in_time_wait_is_free_for_the_embedded_server(tmp_path: Path) -> None:
    port = _port_in_time_wait()
    assert _embedded_port(None, default=port) == port
    with EmbeddedNatsServer(tmp_path / "nats", port=port) as server:  # nats-server agrees
        assert server.port == port


def test_a_port_someone_listens_on_is_not_free() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert _embedded_port(None, default=port) is None
