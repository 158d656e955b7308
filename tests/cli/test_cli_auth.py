"""`ore auth` writes working credentials; `ore serve --auth` runs the embedded server
with them; the embedded server listens on loopback only."""

from __future__ import annotations

import asyncio
import socket
import stat
import struct
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nats
import pytest
from click.testing import CliRunner
from nats.errors import Error as NatsError

from ore_core import ConduitClient, PermissionDenied
from ore_core.bus.server.embedded import EmbeddedNatsServer, _get_json
from ore_core.cli.main import main
from ore_core.cli.options import connect_conduit
from ore_core.config import load_settings
from tests.cli.test_cli_serve import Served, start_serve, wait_until_serving

__all__ = ["start_serve"]  # the fixture, used below


def run_auth(tmp_path: Path, *args: str) -> Path:
    out = tmp_path / "auth"
    result = CliRunner().invoke(main, ["auth", "--out", str(out), *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return out


def test_auth_writes_private_files_for_every_role(tmp_path: Path) -> None:
    out = run_auth(
        tmp_path, "--conduit", "slack", "--conduit", "bridge:nats", "--url", "nats://h:4222"
    )
    names = sorted(path.name for path in out.iterdir())
    assert names == [
        "admin.toml",
        "conduit-bridge.toml",
        "conduit-slack.toml",
        "core.toml",
        "nats-auth.conf",
    ]
    for path in out.iterdir():
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    slack = load_settings(out / "conduit-slack.toml").nats
    bridge = load_settings(out / "conduit-bridge.toml").nats
    assert (slack.user, slack.namespace, bridge.user, bridge.namespace) == (
        "slack",
        "slack",
        "bridge",
        "nats",
    )
    assert slack.url == ["nats://h:4222"]
    assert slack.secret is not None
    assert bridge.secret is not None
    assert slack.secret.get_secret_value() != bridge.secret.get_secret_value()
    config = (out / "nats-auth.conf").read_text()
    assert '"ore.in.nats.>"' in config
    assert '"_INBOX_nats.>"' in config


@pytest.mark.parametrize("spec", ["Slack", "a.b", "ore", "admin", "x" * 33, "a:B"])
def test_auth_refuses_a_bad_or_reserved_conduit_name(tmp_path: Path, spec: str) -> None:
    result = CliRunner().invoke(main, ["auth", "--out", str(tmp_path), "--conduit", spec])
    assert result.exit_code == 2
    assert "--conduit" in result.output


async def test_nkey_conduits_connect_with_their_seed_file_and_stay_in_their_namespace(
    tmp_path: Path,
) -> None:
    out = run_auth(tmp_path, "--nkey", "--conduit", "slack")
    seed_file = out / "conduit-slack.nk"
    assert stat.S_IMODE(seed_file.stat().st_mode) == 0o600
    assert "password" not in tomllib.loads((out / "conduit-slack.toml").read_text())["nats"]
    config = (out / "nats-auth.conf").read_text()
    async with EmbeddedNatsServer(tmp_path / "nats", config=config) as server:
        settings = load_settings(out / "conduit-slack.toml").nats
        settings = settings.model_copy(update={"url": [server.url]})
        async with await connect_conduit("slack", settings, 10) as client:
            assert client.namespace == "slack"
            with pytest.raises(PermissionDenied):
                await client.permissions.guard(
                    "ore.api.other.health", client.nc.request("ore.api.other.health", b"")
                )
        with pytest.raises(NatsError):  # no user/password works for it
            await nats.connect(
                server.url, user="slack", password="x", allow_reconnect=False, connect_timeout=2
            )


async def test_serve_with_auth_runs_the_embedded_server_with_those_users(
    tmp_path: Path, start_serve: Callable[..., Served]
) -> None:
    out = run_auth(tmp_path, "--conduit", "raw")
    served = start_serve("--auth", str(out / "nats-auth.conf"), config=out / "core.toml")
    assert served.process.stdout is not None
    line = await asyncio.to_thread(served.process.stdout.readline)
    assert line.startswith("Embedded NATS server listening on nats://127.0.0.1:"), served.stderr()
    url = line.split()[5]
    with pytest.raises(NatsError):  # anonymous clients are refused now
        await nats.connect(url, allow_reconnect=False, connect_timeout=2)
    admin_settings = tomllib.loads((out / "admin.toml").read_text())["nats"]
    admin = await nats.connect(
        url, user="admin", password=admin_settings["password"], max_reconnect_attempts=0
    )
    try:
        await wait_until_serving(admin, served)
        raw_settings = load_settings(out / "conduit-raw.toml").nats.model_copy(
            update={"url": [url]}
        )
        async with await connect_conduit("raw", raw_settings, 10) as raw:
            events = await converse_as(raw, "secured", "hi")
        assert events[-1].kind == "lifecycle"
    finally:
        await admin.close()
    assert await served.terminate() == 0


async def converse_as(client: ConduitClient, thread: str, text: str) -> list[Any]:
    events = []
    async with client.events(thread) as feed:
        await client.send(thread, text)
        async with asyncio.timeout(20):
            async for delivery in feed:
                events.append(delivery.event)
                if delivery.kind == "lifecycle" and delivery.event.phase == "done":
                    return events
    return events


def test_serve_auth_needs_the_core_credentials(
    tmp_path: Path, start_serve: Callable[..., Served]
) -> None:
    out = run_auth(tmp_path)
    served = start_serve("--auth", str(out / "nats-auth.conf"))
    assert served.process.wait(30) == 2
    assert "core.toml" in served.stderr()


def _non_loopback_addresses() -> list[str]:
    """This machine's own IPv4 addresses other than loopback (read locally, no traffic)."""
    found: set[str] = set()
    try:
        import fcntl

        for _, name in socket.if_nameindex():
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
                request = struct.pack("256s", name.encode()[:15])
                try:
                    answer = fcntl.ioctl(sock.fileno(), 0x8915, request)  # SIOCGIFADDR
                except OSError:
                    continue  # no IPv4 address on this interface
                found.add(socket.inet_ntoa(answer[20:24]))
    except (ImportError, OSError):
        pass
    return sorted(address for address in found if not address.startswith("127."))


def test_the_embedded_server_binds_loopback_only(tmp_path: Path) -> None:
    with EmbeddedNatsServer(tmp_path / "nats") as server:
        varz = _get_json(f"{server.monitor_url}/varz")
        assert varz is not None
        assert (varz["host"], varz["http_host"]) == ("127.0.0.1", "127.0.0.1")
        socket.create_connection(("127.0.0.1", server.port), timeout=5).close()
        for address in _non_loopback_addresses():
            with pytest.raises(OSError):
                socket.create_connection((address, server.port), timeout=2).close()


def test_config_cannot_move_the_embedded_server_off_loopback(tmp_path: Path) -> None:
    config = 'listen: "0.0.0.0:-1"\nhttp: "0.0.0.0:-1"\n'
    with EmbeddedNatsServer(tmp_path / "nats", config=config) as server:
        varz = _get_json(f"{server.monitor_url}/varz")
        assert varz is not None
        assert varz["host"] == "127.0.0.1"
