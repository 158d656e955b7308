"""The plugin: found through its installed entry point, configured from `[plugins.guard]`."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from ore_core import OreError
from ore_core.cli.main import main
from ore_core.cli.processor import answering_line, choose_processor
from ore_core.config import OreSettings
from ore_core.plugins.manager import LOAD_PLUGINS_ENV, create_plugin_manager
from ore_core.plugins.registry import collect_registrations
from ore_core.testing.plugins import temporary_plugin
from ore_guard import GuardConfig, GuardInterceptor
from ore_guard import plugin as guard_plugin

pytestmark = pytest.mark.usefixtures("ore_isolated_env")


def test_the_installed_entry_point_registers_the_guard_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(LOAD_PLUGINS_ENV, "ore-guard")
    manager = create_plugin_manager()
    registrations = collect_registrations(manager, OreSettings())
    assert manager.load_errors == []
    assert isinstance(registrations.interceptors[0], GuardInterceptor)


def test_the_registered_interceptor_uses_the_plugins_settings_table() -> None:
    manager = create_plugin_manager(load_entry_points=False)
    with temporary_plugin(manager, guard_plugin, "guard"):
        settings = OreSettings(plugins={"guard": {"burst": 2, "redact": False}})
        interceptors = collect_registrations(manager, settings).interceptors
    [guard] = [i for i in interceptors if isinstance(i, GuardInterceptor)]
    assert (guard.config.burst, guard.config.redact) == (2, False)


def test_a_bad_pattern_stops_start_up_naming_it() -> None:
    manager = create_plugin_manager(load_entry_points=False)
    with temporary_plugin(manager, guard_plugin, "guard"):
        settings = OreSettings(plugins={"guard": {"patterns": {"ticket_id": "TCK-("}}})
        with pytest.raises(OreError, match="ticket_id"):
            collect_registrations(manager, settings)


def test_the_start_up_line_names_the_guards_limits() -> None:
    manager = create_plugin_manager(load_entry_points=False)
    with temporary_plugin(manager, guard_plugin, "guard"):
        registrations = collect_registrations(manager, OreSettings())
    choice = choose_processor(OreSettings(), ["echo"], {})
    line = answering_line(
        "openai", "openai model m at U", choice, registrations.interceptor_descriptions()
    )
    assert line == f"answering with openai model m at U; guard: {GuardConfig().describe()}"


def test_ore_config_shows_the_guards_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(LOAD_PLUGINS_ENV, "ore-guard")
    monkeypatch.setenv("ORE_PLUGINS__GUARD__BURST", "7")
    result = CliRunner().invoke(main, ["config", "--json"])
    assert result.exit_code == 0, result.output
    rows = {row["key"]: row for row in json.loads(result.output)}
    assert rows["plugins.guard"]["value"] == GuardConfig(burst=7).describe()
