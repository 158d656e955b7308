"""The fsync policy of the embedded nats-server and the durability doctor states (issue 40).

The server is asked what it runs with (`/varz`), not the config text ore wrote: a
block nats-server ignored or misread would pass a test of the text.
"""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import pytest
from click.testing import CliRunner

from ore_core.cli import main
from ore_core.cli.app import start_embedded_nats
from ore_core.config import NatsSettings
from tests.config_errors import assert_settings_error

ALWAYS_LINE = (
    "embedded nats-server, one node, fsync before every acknowledgement (nats.sync = "
    "always): an acknowledged message survives a crash or power loss of this machine"
)
INTERVAL_LINE = (
    "embedded nats-server, one node, fsync every 10s (nats.sync = interval:10s): a power "
    "loss or OS crash loses what was acknowledged in the last 10s (a crash of the process "
    "alone does not)"
)
OPERATOR_R1_LINE = (
    "operator's nats-server, ore's streams R1: an acknowledged message survives a power "
    "loss only if that server runs with `sync_interval: always` (its default fsyncs every "
    "2 min); nats.sync applies only to the embedded server"
)
OPERATOR_R3_LINE = (
    "operator's nats-server cluster, ore's streams R3: an acknowledged message is on 2 of 3 "
    "nodes, so it survives losing a minority of them; a power loss of all of them loses the "
    "last sync_interval (default 2 min) unless the servers run with `sync_interval: always`; "
    "nats.sync applies only to the embedded server"
)


def jetstream_config(monitor_url: str) -> dict[str, Any]:
    """What the running server says its JetStream runs with."""
    with urllib.request.urlopen(f"{monitor_url}/varz", timeout=5) as response:
        config: dict[str, Any] = json.loads(response.read())["jetstream"]["config"]
    return config


async def test_the_embedded_server_fsyncs_before_every_acknowledgement_by_default() -> None:
    server = await start_embedded_nats(NatsSettings())
    try:
        assert jetstream_config(server.monitor_url)["sync_always"] is True
    finally:
        await server.astop()


async def test_an_interval_setting_becomes_the_embedded_servers_sync_interval() -> None:
    server = await start_embedded_nats(NatsSettings(sync="interval:10s"))
    try:
        config = jetstream_config(server.monitor_url)
    finally:
        await server.astop()
    assert "sync_always" not in config  # the server leaves it out when false
    assert config["sync_interval"] == 10_000_000_000  # ns


def test_a_sync_setting_that_is_neither_always_nor_an_interval_is_one_line_naming_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    says = ("nats.sync", "always or interval:DURATION")
    assert_settings_error(monkeypatch, "ORE_NATS__SYNC", "sometimes", *says)


@pytest.fixture
def _no_plugins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORE_LOAD_PLUGINS", "")


def durability_check(monkeypatch: pytest.MonkeyPatch, **env: str) -> dict[str, str]:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    result = CliRunner().invoke(main, ["doctor", "--json"])
    checks = {check["part"]: check for check in json.loads(result.stdout)}
    found: dict[str, str] = checks["durability"]
    return found


@pytest.mark.usefixtures("_no_plugins")
def test_doctor_says_the_embedded_server_fsyncs_every_acknowledgement(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    check = durability_check(monkeypatch)
    assert check == {"part": "durability", "status": "ok", "found": ALWAYS_LINE, "todo": ""}


@pytest.mark.usefixtures("_no_plugins")
def test_doctor_warns_what_an_interval_can_lose(monkeypatch: pytest.MonkeyPatch) -> None:
    check = durability_check(monkeypatch, ORE_NATS__SYNC="interval:10s")
    assert check == {
        "part": "durability",
        "status": "warn",
        "found": INTERVAL_LINE,
        "todo": 'set nats.sync = "always" unless losing that window is fine',
    }


@pytest.mark.usefixtures("_no_plugins")
def test_doctor_warns_that_a_single_operator_server_needs_its_own_sync_setting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    check = durability_check(monkeypatch, ORE_NATS__URL="nats://127.0.0.1:1")
    assert check == {
        "part": "durability",
        "status": "warn",
        "found": OPERATOR_R1_LINE,
        "todo": "give the server `sync_interval: always` in its jetstream block, or run a "
        "3-node cluster with nats.replicas = 3 (`ore migrate`); docs/operating-nats.md",
    }


@pytest.mark.usefixtures("_no_plugins")
def test_doctor_says_what_three_replicas_survive(monkeypatch: pytest.MonkeyPatch) -> None:
    check = durability_check(
        monkeypatch, ORE_NATS__URL="nats://127.0.0.1:1", ORE_NATS__REPLICAS="3"
    )
    assert check == {"part": "durability", "status": "ok", "found": OPERATOR_R3_LINE, "todo": ""}
