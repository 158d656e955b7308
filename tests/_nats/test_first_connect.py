"""A refusal at the first connect to NATS is said at once (issue 28, item 7).

Wrong or missing credentials and a port that is not NATS used to be retried until the
caller's timeout and reported as an unreachable server. Each test waits far longer
than a refusal needs: a refusal that is not recognised ends in that timeout instead.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest

from ore_core._nats.connection import connect_nats
from ore_core._nats.first_connect import NatsRefused
from ore_core.bus.server.embedded import EmbeddedNatsServer
from tests.ore_process import ORE

PATIENCE = 60.0
USERS = "authorization { users = [ {user: ore, password: right} ] }\n"

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@pytest.fixture
def guarded_server(tmp_path: Path) -> Iterator[EmbeddedNatsServer]:
    with EmbeddedNatsServer(tmp_path / "nats", config=USERS) as server:
        yield server


async def _refusal(url: str, **options: object) -> str:
    with pytest.raises(NatsRefused) as refused:
        async with asyncio.timeout(PATIENCE):
            await connect_nats([url], max_reconnect_attempts=-1, **options)
    return str(refused.value)


async def _serving(handler: Handler) -> tuple[asyncio.Server, str]:
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    return server, f"nats://127.0.0.1:{server.sockets[0].getsockname()[1]}"


async def test_a_wrong_password_is_a_refused_user(guarded_server: EmbeddedNatsServer) -> None:
    message = await _refusal(guarded_server.url, user="ore", password="wrong")
    assert message.startswith(f"NATS at {guarded_server.url} refused the user")
    assert "nats.user / nats.password" in message


async def test_no_credentials_is_said_as_such(guarded_server: EmbeddedNatsServer) -> None:
    message = await _refusal(guarded_server.url)
    assert "refused a connection without credentials" in message


async def test_the_right_credentials_still_connect(guarded_server: EmbeddedNatsServer) -> None:
    nc = await connect_nats([guarded_server.url], user="ore", password="right")
    await nc.close()


async def test_a_server_with_another_greeting_is_not_nats() -> None:
    async def banner(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"SSH-2.0-OpenSSH_9.6\r\n")
        writer.close()

    server, url = await _serving(banner)
    async with server:
        message = await _refusal(url)
    assert message.startswith(f"the server at {url} answered but is not a NATS server")


async def test_a_silent_server_that_accepts_connections_is_not_nats() -> None:
    """An HTTP server accepts the connection and waits for a request: no NATS greeting."""

    async def http(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.read(100)
        finally:
            writer.close()

    server, url = await _serving(http)
    async with server:
        message = await _refusal(url)
    assert "is not a NATS server" in message


@pytest.mark.slow
def test_serve_with_a_wrong_password_says_nats_refused_the_user(
    guarded_server: EmbeddedNatsServer,
) -> None:
    result = subprocess.run(
        [str(ORE), "serve", "--nats", guarded_server.url],
        env={
            **os.environ,
            "ORE_LOAD_PLUGINS": "",
            "ORE_NATS__USER": "ore",
            "ORE_NATS__PASSWORD": "wrong",
        },
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 1
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1
    assert errors[0].startswith(f"Error: NATS at {guarded_server.url} refused the user")
