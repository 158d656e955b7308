"""The embedded nats-server: free ports, JetStream, restart, clean stop, clear errors."""

import asyncio
import os
import socket
import threading
from pathlib import Path

import nats
import platformdirs
import pytest
from nats.aio.client import Client

from ore_core.bus.server.embedded import (
    EmbeddedNatsServer,
    NatsPortInUse,
    NatsServerError,
    default_store_dir,
    find_nats_server,
)


def accepts_nats_clients(url_port: int) -> bool:
    """True when something on the loopback port greets like a nats-server."""
    try:
        with socket.create_connection(("127.0.0.1", url_port), timeout=2) as sock:
            return sock.recv(5) == b"INFO "
    except OSError:
        return False


def process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def test_server_listens_on_a_loopback_port_it_chose(
    ore_nats_server: EmbeddedNatsServer, ore_nats_client: Client
) -> None:
    assert ore_nats_server.url == f"nats://127.0.0.1:{ore_nats_server.port}"
    assert ore_nats_client.connected_url is not None
    assert ore_nats_client.connected_url.port == ore_nats_server.port


async def test_jetstream_stores_a_published_message(ore_nats_client: Client) -> None:
    js = ore_nats_client.jetstream()
    await js.add_stream(name="S", subjects=["s.>"])
    ack = await js.publish("s.1", b"hello")
    assert (await js.get_msg("S", ack.seq)).data == b"hello"


async def test_restart_keeps_the_port_and_the_stored_messages(
    ore_nats_server: EmbeddedNatsServer,
) -> None:
    client = await nats.connect(ore_nats_server.url)
    js = client.jetstream()
    await js.add_stream(name="S", subjects=["s.>"])
    ack = await js.publish("s.1", b"kept")
    await client.close()
    port, store_dir = ore_nats_server.port, ore_nats_server.store_dir

    await ore_nats_server.arestart()

    assert (ore_nats_server.port, ore_nats_server.store_dir) == (port, store_dir)
    client = await nats.connect(ore_nats_server.url)
    try:
        assert (await client.jetstream().get_msg("S", ack.seq)).data == b"kept"
    finally:
        await client.close()


async def test_connected_client_reconnects_to_the_same_url_after_restart(
    ore_nats_server: EmbeddedNatsServer,
) -> None:
    reconnected = asyncio.Event()

    async def on_reconnect() -> None:
        reconnected.set()

    client = await nats.connect(
        ore_nats_server.url, reconnect_time_wait=0.05, reconnected_cb=on_reconnect
    )
    try:
        await ore_nats_server.arestart()
        await asyncio.wait_for(reconnected.wait(), timeout=10)
        await client.flush(timeout=30)
    finally:
        await client.close()


def test_stop_ends_its_process_and_leaves_another_server_running(tmp_path: Path) -> None:
    with EmbeddedNatsServer(tmp_path / "a") as first, EmbeddedNatsServer(tmp_path / "b") as other:
        pid = first.pid
        first.stop()
        assert not first.running
        assert not process_exists(pid)
        assert other.running
        assert accepts_nats_clients(other.port)


def test_stop_removes_the_ports_file(ore_nats_server: EmbeddedNatsServer) -> None:
    ore_nats_server.stop()
    assert list(ore_nats_server.store_dir.glob("*.ports")) == []


def test_two_servers_run_side_by_side_on_different_ports(tmp_path: Path) -> None:
    with EmbeddedNatsServer(tmp_path / "a") as first, EmbeddedNatsServer(tmp_path / "b") as other:
        assert first.port != other.port
        assert accepts_nats_clients(first.port)
        assert accepts_nats_clients(other.port)


def test_invalid_config_fails_fast_with_the_servers_own_message(tmp_path: Path) -> None:
    server = EmbeddedNatsServer(tmp_path, config="listen: [oops")
    with pytest.raises(NatsServerError, match=r"exited with code 1[\s\S]*Parse error on line 1"):
        server.start()
    assert not server.running


async def test_extra_config_text_reaches_the_server(tmp_path: Path) -> None:
    async with EmbeddedNatsServer(tmp_path, config="max_payload: 4096\n") as server:
        client = await nats.connect(server.url)
        try:
            assert client.max_payload == 4096
        finally:
            await client.close()


def test_restart_onto_a_port_taken_meanwhile_raises_port_in_use(
    ore_nats_server: EmbeddedNatsServer,
) -> None:
    ore_nats_server.stop()
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", ore_nats_server.port))
        squatter.listen()
        with pytest.raises(NatsPortInUse, match="another process holds one of its ports"):
            ore_nats_server.start()
    assert not ore_nats_server.running


def test_missing_binary_is_named_in_the_error(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-nats-server"
    with pytest.raises(NatsServerError, match="no-such-nats-server does not exist"):
        EmbeddedNatsServer(tmp_path, binary=missing).start()


def test_starting_a_running_server_again_is_refused(ore_nats_server: EmbeddedNatsServer) -> None:
    with pytest.raises(NatsServerError, match="already running"):
        ore_nats_server.start()


def test_url_of_a_server_never_started_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(NatsServerError, match="never started"):
        _ = EmbeddedNatsServer(tmp_path).url


async def test_async_context_manager_stops_the_server_on_exit(tmp_path: Path) -> None:
    async with EmbeddedNatsServer(tmp_path) as server:
        pid = server.pid
        assert accepts_nats_clients(server.port)
    assert not server.running
    assert not process_exists(pid)


async def test_cancelled_async_start_leaves_no_process(tmp_path: Path) -> None:
    starting, started = threading.Event(), threading.Event()

    class Observed(EmbeddedNatsServer):
        def start(self) -> None:
            starting.set()
            super().start()
            started.set()

    server = Observed(tmp_path)
    task = asyncio.create_task(server.astart())
    assert await asyncio.to_thread(starting.wait, 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await asyncio.to_thread(started.wait, 10)
    leaked = server.running
    server.stop()  # so a regression fails without leaving a process behind
    assert not leaked


def test_default_store_dir_is_under_the_users_state_dir() -> None:
    assert default_store_dir() == Path(platformdirs.user_state_dir("ore")) / "nats"
    assert EmbeddedNatsServer().store_dir == default_store_dir()


def test_server_not_ready_in_time_is_stopped_with_a_clear_error(tmp_path: Path) -> None:
    # A "server" that never becomes ready, whatever the machine's speed: a real one with a
    # timeout of 0 is sometimes ready at the first look.
    never_ready = tmp_path / "never-ready"
    never_ready.write_text("#!/bin/sh\nexec sleep 600\n")
    never_ready.chmod(0o755)
    server = EmbeddedNatsServer(tmp_path / "data", binary=never_ready, start_timeout=0.2)
    with pytest.raises(NatsServerError, match=r"was not ready within 0\.2 s"):
        server.start()
    assert not server.running


def test_binary_of_the_wheel_is_found_without_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "")
    find_nats_server.cache_clear()
    try:
        binary = find_nats_server()
    finally:
        find_nats_server.cache_clear()
    assert binary.name == "nats-server"
    assert os.access(binary, os.X_OK)
