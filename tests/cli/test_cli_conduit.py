"""`ore conduit` as a real process: listing, bridging to a real `ore serve`, failures, SIGTERM."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import nats
import pytest
from nats.aio.client import Client
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout

from ore_core.bus.server.embedded import EmbeddedNatsServer
from tests.ore_process import EXIT_TIMEOUT, ORE, READY_TIMEOUT
from tests.paths import ROOT

pytestmark = pytest.mark.slow  # starts processes: `-m 'not slow'` skips it


@dataclass
class Process:
    """A running `ore` command and the files its output goes to."""

    popen: subprocess.Popen[str]
    log_path: Path

    def stdout(self) -> str:
        return self.log_path.with_suffix(".out").read_text()

    def stderr(self) -> str:
        return self.log_path.read_text()

    async def exit_status(self) -> int:
        """Wait for the process to end (off the event loop); its exit status."""
        return await asyncio.to_thread(self.popen.wait, EXIT_TIMEOUT)

    async def terminate(self) -> int:
        """SIGTERM, then the exit status."""
        self.popen.send_signal(signal.SIGTERM)
        return await self.exit_status()


@pytest.fixture
def start_ore(ore_isolated_env: Path, tmp_path: Path) -> Iterator[Callable[..., Process]]:
    """`start_ore(*args, **env)` runs `ore *args`; every process is gone after the test."""
    started: list[Process] = []

    def start(*args: str, **env: str) -> Process:
        log_path = tmp_path / f"ore{len(started)}.log"
        environment = {
            **os.environ,
            "ORE_LOAD_PLUGINS": "ore-conduit-nats",  # not the other test plugins of the venv
            "ORE_STORE__PATH": str(tmp_path / "threads.db"),
            "ORE_LOG__FORMAT": "json",
            **env,
        }
        with log_path.open("w") as stderr, log_path.with_suffix(".out").open("w") as stdout:
            popen = subprocess.Popen(
                [str(ORE), *args], stdout=stdout, stderr=stderr, text=True, env=environment
            )
        started.append(Process(popen, log_path))
        return started[-1]

    yield start
    for process in started:
        if process.popen.poll() is None:
            process.popen.kill()
            process.popen.wait()


@pytest.fixture
async def raw(ore_nats_server: EmbeddedNatsServer) -> AsyncIterator[Client]:
    """A plain nats-py connection to the test's server."""
    client = await nats.connect(ore_nats_server.url, max_reconnect_attempts=0)
    try:
        yield client
    finally:
        await client.close()


async def until_answered(nc: Client, subject: str, process: Process) -> None:
    """Poll a request to `subject` until something answers it.

    Another process cannot announce that it is ready, so this polls, and fails early
    with that process's log if it died.
    """
    deadline = time.monotonic() + READY_TIMEOUT
    while True:
        try:
            await nc.request(subject, b"", timeout=0.5)
            return
        except (NoRespondersError, NatsTimeout):
            if process.popen.poll() is not None:
                pytest.fail(f"ore exited with {process.popen.returncode}:\n{process.stderr()}")
            if time.monotonic() > deadline:
                pytest.fail(f"{subject} got no answer within {READY_TIMEOUT}s:\n{process.stderr()}")
            await asyncio.sleep(0.05)


async def bridge_running(
    ore_nats_server: EmbeddedNatsServer, raw: Client, start_ore: Callable[..., Process]
) -> tuple[Process, Process]:
    """`ore serve` and `ore conduit nats` on the test's server, both ready."""
    serve = start_ore("serve", "--nats", ore_nats_server.url)
    await until_answered(raw, "ore.admin.health", serve)
    bridge = start_ore("conduit", "nats", "--nats", ore_nats_server.url)
    # An empty message is refused with an error reply: the bridge listens.
    await until_answered(raw, "bridge.ready-probe.in", bridge)
    return serve, bridge


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def test_list_shows_the_nats_conduit_with_its_distribution(
    start_ore: Callable[..., Process],
) -> None:
    listing = start_ore("conduit", "--list")
    assert await listing.exit_status() == 0
    out = listing.stdout().splitlines()
    assert out[0].split() == ["NAME", "DISTRIBUTION", "ENDPOINT", "DESCRIPTION"]
    assert out[1].split()[:4] == ["nats", "ore-conduit-nats", "0.1.0", "nats:CHANNEL"]
    assert "Plain NATS subjects" in out[1]


CHECKOUT = ROOT


async def test_list_all_shows_every_conduit_of_the_checkout_with_its_install_line(
    start_ore: Callable[..., Process],
) -> None:
    listing = start_ore("conduit", "--list", "--all")
    assert await listing.exit_status() == 0
    rows = {line.split()[0]: line.split()[1:] for line in listing.stdout().splitlines()[5:]}
    assert rows == {
        name: [
            "yes" if name == "nats" else "no",
            "ore",
            "install",
            str(CHECKOUT / "conduits" / name),
        ]
        for name in ("discord", "matrix", "nats", "slack", "stdin", "telegram", "web")
    }


async def test_the_conduit_bridges_a_raw_nats_client_to_ore_serve(
    ore_nats_server: EmbeddedNatsServer, raw: Client, start_ore: Callable[..., Process]
) -> None:
    await bridge_running(ore_nats_server, raw, start_ore)
    out = await raw.subscribe("bridge.support.out")
    reply = await raw.request("bridge.support.in", b"hello ore", timeout=10)
    assert reply.data == b"hello ore"  # ore serve answers with the echo processor
    assert (await out.next_msg(timeout=10)).data == b"hello ore"


async def test_sigterm_stops_the_conduit_with_exit_status_0(
    ore_nats_server: EmbeddedNatsServer, raw: Client, start_ore: Callable[..., Process]
) -> None:
    serve, bridge = await bridge_running(ore_nats_server, raw, start_ore)
    assert await bridge.terminate() == 0
    with pytest.raises(NoRespondersError):  # it stopped listening
        await raw.request("bridge.support.in", b"anyone?", timeout=2)
    assert await serve.terminate() == 0


async def test_set_overrides_the_conduit_settings(
    ore_nats_server: EmbeddedNatsServer, raw: Client, start_ore: Callable[..., Process]
) -> None:
    serve = start_ore("serve", "--nats", ore_nats_server.url)
    await until_answered(raw, "ore.admin.health", serve)
    bridge = start_ore("conduit", "nats", "--nats", ore_nats_server.url, "--set", "prefix=acme.ops")
    await until_answered(raw, "acme.ops.ready-probe.in", bridge)
    reply = await raw.request("acme.ops.support.in", b"via acme", timeout=10)
    assert reply.data == b"via acme"


async def test_a_setting_is_also_an_option_of_the_conduit(
    ore_nats_server: EmbeddedNatsServer, raw: Client, start_ore: Callable[..., Process]
) -> None:
    serve = start_ore("serve", "--nats", ore_nats_server.url)
    await until_answered(raw, "ore.admin.health", serve)
    bridge = start_ore("conduit", "nats", "--nats", ore_nats_server.url, "--prefix", "acme.dev")
    await until_answered(raw, "acme.dev.ready-probe.in", bridge)
    reply = await raw.request("acme.dev.support.in", b"via a flag", timeout=10)
    assert reply.data == b"via a flag"


async def test_an_option_that_is_no_setting_of_the_conduit_is_a_usage_error(
    start_ore: Callable[..., Process],
) -> None:
    process = start_ore("conduit", "nats", "--nats", "nats://127.0.0.1:1", "--colour", "red")
    assert await process.exit_status() == 2
    assert "unknown option '--colour' for conduit nats (its settings: " in process.stderr()
    assert "--prefix" in process.stderr()


async def test_without_a_nats_url_the_conduit_exits_1_with_one_line(
    start_ore: Callable[..., Process],
) -> None:
    process = start_ore("conduit", "nats")
    assert await process.exit_status() == 1
    lines = process.stderr().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("Error: conduit nats: no NATS server configured")


async def test_an_unreachable_nats_exits_1_naming_the_url(
    start_ore: Callable[..., Process],
) -> None:
    url = f"nats://127.0.0.1:{free_port()}"
    process = start_ore(
        "conduit", "nats", "--nats", url, "--connect-timeout", "0.5", ORE_LOG__LEVEL="warning"
    )
    assert await process.exit_status() == 1
    assert process.stderr().splitlines() == [
        f"Error: conduit nats: cannot reach NATS at {url} within 0.5s; is the server running, "
        "and are --nats / nats.url right?"
    ]


async def test_an_invalid_setting_exits_1_naming_the_key(
    start_ore: Callable[..., Process],
) -> None:
    process = start_ore("conduit", "nats", "--nats", "nats://127.0.0.1:1", "--set", "output=xml")
    assert await process.exit_status() == 1
    assert process.stderr().startswith("Error: invalid [plugins.nats] settings: output:")


async def test_an_unknown_conduit_exits_1_listing_the_known_ones(
    start_ore: Callable[..., Process],
) -> None:
    process = start_ore("conduit", "smoke-signals", "--nats", "nats://127.0.0.1:1")
    assert await process.exit_status() == 1
    assert 'no conduit named "smoke-signals" (registered: nats)' in process.stderr()


async def test_without_a_url_the_conduit_finds_the_running_serve(
    ore_nats_server: EmbeddedNatsServer,
    raw: Client,
    start_ore: Callable[..., Process],
    ore_isolated_env: Path,
) -> None:
    serve = start_ore("serve", "--nats", ore_nats_server.url)
    await until_answered(raw, "ore.admin.health", serve)
    record = ore_isolated_env / "state" / "ore" / "serve.d" / f"{serve.popen.pid}.json"
    async with asyncio.timeout(READY_TIMEOUT):  # written right after the core answers
        while True:
            if record.exists():
                break
            await asyncio.sleep(0.05)  # another process writes it: nothing to wait on
    bridge = start_ore("conduit", "nats")  # no --nats, no nats.url
    await until_answered(raw, "bridge.ready-probe.in", bridge)
    reply = await raw.request("bridge.support.in", b"found you", timeout=30)
    assert reply.data == b"found you"
    assert f"using ore serve (pid {serve.popen.pid}) at {ore_nats_server.url}" in bridge.stderr()
    assert await bridge.terminate() == 0
    assert await serve.terminate() == 0
