"""`ore auth` and the secured embedded server (issue 28, item 11).

The printed serve command gives the embedded server its users; `ore serve` refuses to
run the embedded server open when the settings name a user; `ore auth --conduit nats`
grants the bridge its own subjects; a conduit whose subscriptions are refused exits
with one line instead of running idle.
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable
from pathlib import Path

import nats
import pytest
from click.testing import CliRunner

from ore_core.bus.server.embedded import EmbeddedNatsServer
from ore_core.cli.main import main
from tests.cli.test_cli_conduit import Process, start_ore, until_answered
from tests.ore_process import run_ore

__all__ = ["start_ore"]  # the fixture, used below


def auth(tmp_path: Path, *args: str, plugins: str = "ore-conduit-nats") -> tuple[Path, list[str]]:
    """Run `ore auth` into tmp_path/auth; the directory and the lines it printed."""
    out = tmp_path / "auth"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ORE_LOAD_PLUGINS", plugins)
        result = CliRunner().invoke(
            main, ["auth", "--out", str(out), *args], catch_exceptions=False
        )
    assert result.exit_code == 0, result.output
    return out, result.output.splitlines()


def password(settings: Path) -> str:
    return str(tomllib.loads(settings.read_text())["nats"]["password"])


def test_auth_prints_the_serve_command_that_gives_the_embedded_server_its_users(
    tmp_path: Path,
) -> None:
    out, lines = auth(tmp_path)
    assert f"ore serve:  ore --config {out}/core.toml serve --auth {out}/nats-auth.conf" in lines


def test_auth_for_a_server_of_ones_own_prints_serve_without_auth(tmp_path: Path) -> None:
    out, lines = auth(tmp_path, "--url", "nats://127.0.0.1:4222")
    assert f"ore serve:  ore --config {out}/core.toml serve" in lines
    assert "  (include it in your server's configuration and restart the server)" in lines


def test_serve_refuses_an_open_embedded_server_when_the_settings_name_a_user(
    tmp_path: Path,
) -> None:
    out, _ = auth(tmp_path)
    result = run_ore("--config", str(out / "core.toml"), "serve", "--port", "0", timeout=60)
    assert result.returncode == 2
    assert "Embedded NATS server listening" not in result.stdout
    assert "would run without users and let anyone in: add --auth" in result.stderr


def test_the_nats_conduits_user_may_use_the_bridge_subjects(tmp_path: Path) -> None:
    out, _ = auth(tmp_path, "--conduit", "nats")
    server_config = (out / "nats-auth.conf").read_text()
    bridge_user = server_config.split("# conduit nats:", 1)[1]
    assert '"bridge.*.in", "bridge.*.interrupt"' in bridge_user
    assert '"bridge.*.out"' in bridge_user
    assert "allow_responses: true" in bridge_user


@pytest.mark.slow
async def test_the_bridge_answers_with_the_credentials_ore_auth_wrote(
    tmp_path: Path, start_ore: Callable[..., Process]
) -> None:
    out, _ = auth(tmp_path, "--conduit", "nats")
    config = (out / "nats-auth.conf").read_text()
    with EmbeddedNatsServer(tmp_path / "nats", config=config) as server:
        serve = start_ore("--config", str(out / "core.toml"), "serve", "--nats", server.url)
        core = await nats.connect(server.url, user="ore", password=password(out / "core.toml"))
        try:
            await until_answered(core, "ore.admin.health", serve)
            bridge = start_ore(
                "--config", str(out / "conduit-nats.toml"), "conduit", "nats", "--nats", server.url
            )
            await until_answered(core, "bridge.ready-probe.in", bridge)
            reply = await core.request("bridge.secured.in", b"hello", timeout=30)
        finally:
            await core.close()
    assert reply.data == b"hello"


@pytest.mark.slow
async def test_a_bridge_whose_subscriptions_are_refused_exits_with_one_line(
    tmp_path: Path, start_ore: Callable[..., Process]
) -> None:
    # Written without the nats conduit installed: its user gets ore's subjects only.
    out, _ = auth(tmp_path, "--conduit", "nats", plugins="")
    config = (out / "nats-auth.conf").read_text()
    with EmbeddedNatsServer(tmp_path / "nats", config=config) as server:
        serve = start_ore("--config", str(out / "core.toml"), "serve", "--nats", server.url)
        core = await nats.connect(server.url, user="ore", password=password(out / "core.toml"))
        try:
            await until_answered(core, "ore.admin.health", serve)
        finally:
            await core.close()
        bridge = start_ore(
            "--config",
            str(out / "conduit-nats.toml"),
            "conduit",
            "nats",
            "--nats",
            server.url,
            ORE_LOG__LEVEL="error",
        )
        assert await bridge.exit_status() == 1
    errors = [line for line in bridge.stderr().splitlines() if line.startswith("Error: ")]
    assert errors == [
        "Error: conduit nats: NATS refused to let it subscribe to 'bridge.*.in', so it "
        "cannot hear any message: grant its subjects (bridge.*.in, bridge.*.interrupt; "
        "`ore auth --conduit nats` does) and restart the server"
    ]
