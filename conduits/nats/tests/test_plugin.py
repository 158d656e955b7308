"""The installed distribution offers the bridge as conduit `nats`."""

from __future__ import annotations

import pytest

from ore_conduit_nats import NatsBridge
from ore_core.config import OreSettings
from ore_core.plugins import collect_registrations, create_plugin_manager


def test_the_entry_point_registers_the_bridge_as_nats(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORE_LOAD_PLUGINS", "ore-conduit-nats")
    registrations = collect_registrations(create_plugin_manager(), OreSettings())
    assert registrations.conduit("nats") is NatsBridge
