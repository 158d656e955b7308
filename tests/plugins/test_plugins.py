"""Plugin loading and registration, through the installed `ore-test-plugin` entry point.

`ore-test-plugin` (tests/plugin_dist) implements every hook; `ore-broken-plugin`
ships one plugin whose import raises and one with a misspelt hook.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

import ore_test_plugin
from ore_core import InterceptResult, PluginError, Text, Tool, hookimpl
from ore_core.artifacts import ArtifactRegistry
from ore_core.config import OreSettings
from ore_core.plugins import manager as manager_module
from ore_core.plugins.manager import (
    HOOK_NAMES,
    OrePluginManager,
    await_maybe,
    create_plugin_manager,
    shutdown_plugins,
    startup_plugins,
)
from ore_core.plugins.registry import REGISTRATION_HOOKS, Registrations, collect_registrations
from ore_core.testing.plugins import temporary_plugin

BROKEN_ERROR = "RuntimeError: ore-broken-plugin fails on import on purpose"


@pytest.fixture(autouse=True)
def _isolated(ore_isolated_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Only the two test distributions: real plugins installed beside them (ore-openai,
    # ore-guard, conduits) must not change what these tests see.
    monkeypatch.setenv("ORE_LOAD_PLUGINS", "ore-test-plugin,ore-broken-plugin")
    ore_test_plugin.calls.clear()


@pytest.fixture
def pm() -> OrePluginManager:
    # Without the built-ins, so registrations are exactly what the test plugin adds.
    return create_plugin_manager(builtins=False)


@pytest.fixture
def settings() -> OreSettings:
    return OreSettings()


def collect(pm: OrePluginManager, settings: OreSettings) -> Registrations:
    return collect_registrations(pm, settings, artifact_registry=ArtifactRegistry([Text]))


class Interceptor:
    """A pass-through interceptor with a chosen name and order."""

    def __init__(self, name: str, order: int) -> None:
        self.name = name
        self.order = order

    async def intercept(self, event: Any, stream: Any) -> InterceptResult:
        return InterceptResult(event)


class InterceptorPlugin:
    def __init__(self, *interceptors: Interceptor) -> None:
        self.interceptors = interceptors

    @hookimpl
    def ore_register_interceptors(self, register: Any) -> None:
        for interceptor in self.interceptors:
            register(interceptor)


class StorePlugin:
    @hookimpl
    def ore_register_stores(self, register: Any) -> None:
        register("ore-test", dict)


class LifecyclePlugin:
    """Records lifecycle calls into a shared list; can fail on purpose."""

    def __init__(self, log: list[str], name: str, fail: bool = False) -> None:
        self.log, self.name, self.fail = log, name, fail

    @hookimpl
    async def ore_startup(self, manager: Any) -> None:
        self._record("startup")

    @hookimpl
    async def ore_shutdown(self, manager: Any) -> None:
        self._record("shutdown")

    def _record(self, what: str) -> None:
        if self.fail:
            raise RuntimeError(f"{self.name} {what} failed")
        self.log.append(f"{self.name}:{what}")


# --- loading ---------------------------------------------------------------------


def test_installed_plugin_is_loaded_from_its_entry_point(pm: OrePluginManager) -> None:
    assert pm.get_plugin("test") is ore_test_plugin
    dist = pm.distribution("test")
    assert dist is not None
    assert dist.metadata["Name"] == "ore-test-plugin"


def test_describe_shows_distribution_version_and_every_hook(pm: OrePluginManager) -> None:
    (info,) = [info for info in pm.describe() if info.name == "test"]
    assert (info.distribution, info.version) == ("ore-test-plugin", "0.3.1")
    assert set(info.hooks) == set(HOOK_NAMES)
    assert info.builtin is False


def test_plugin_failing_to_import_is_recorded_and_the_rest_still_load(
    pm: OrePluginManager,
) -> None:
    (failure,) = [failure for failure in pm.load_errors if failure.name == "broken"]
    assert (failure.distribution, failure.version) == ("ore-broken-plugin", "0.0.1")
    assert failure.error == BROKEN_ERROR
    assert pm.get_plugin("test") is ore_test_plugin


def test_plugin_failing_to_import_is_logged_as_a_warning() -> None:
    with capture_logs() as logs:
        create_plugin_manager()
    failures = [log for log in logs if log["event"] == "plugin.load_failed"]
    assert {"plugin": "broken", "error": BROKEN_ERROR, "log_level": "warning"}.items() <= (
        next(log for log in failures if log["plugin"] == "broken").items()
    )


def test_installed_plugin_with_misspelt_hook_is_left_out_with_a_hint(
    pm: OrePluginManager,
) -> None:
    (failure,) = [failure for failure in pm.load_errors if failure.name == "typo"]
    assert 'unknown hook "ore_register_sink"' in failure.error
    assert 'did you mean "ore_register_sinks"' in failure.error
    assert pm.get_plugin("typo") is None


def test_registered_plugin_with_misspelt_hook_raises_naming_the_plugin(
    ore_plugin_manager: OrePluginManager,
) -> None:
    class Misspelt:
        @hookimpl
        def ore_register_tool(self, register: Any) -> None:
            raise AssertionError("never called")

    with (
        pytest.raises(PluginError, match=r'plugin "misspelt" .*"ore_register_tool"'),
        temporary_plugin(ore_plugin_manager, Misspelt(), name="misspelt"),
    ):
        pass
    assert ore_plugin_manager.get_plugin("misspelt") is None


def test_broken_builtin_plugin_raises_instead_of_being_skipped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(manager_module, "BUILTIN_PLUGINS", ["ore_typo_plugin"])
    with pytest.raises(PluginError, match='plugin "ore_typo_plugin" implements unknown hook'):
        create_plugin_manager(load_entry_points=False)


def test_builtin_plugins_load_and_implement_only_known_hooks() -> None:
    pm = create_plugin_manager(load_entry_points=False)
    names = {info.name for info in pm.describe(include_builtins=True)}
    assert names == set(manager_module.BUILTIN_PLUGINS)


def test_load_plugins_allowlist_loads_only_the_named_distributions(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ORE_LOAD_PLUGINS", " Ore_Test.Plugin ")
    pm = create_plugin_manager()
    assert [info.name for info in pm.describe()] == ["test"]
    assert pm.load_errors == []


def test_empty_load_plugins_loads_no_installed_plugin(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORE_LOAD_PLUGINS", "")
    pm = create_plugin_manager()
    assert pm.describe() == []
    assert pm.load_errors == []


def test_load_plugins_naming_an_absent_distribution_is_reported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ORE_LOAD_PLUGINS", "ore-test-plugin,ore-no-such-plugin")
    (failure,) = create_plugin_manager().load_errors
    assert failure.name == "ore-no-such-plugin"
    assert "ORE_LOAD_PLUGINS" in failure.error


def test_trace_plugins_logs_every_hook_call(
    monkeypatch: pytest.MonkeyPatch, settings: OreSettings
) -> None:
    monkeypatch.setenv("ORE_LOAD_PLUGINS", "ore-test-plugin")
    monkeypatch.setenv("ORE_TRACE_PLUGINS", "1")
    pm = create_plugin_manager(builtins=False)
    with capture_logs() as logs:
        collect(pm, settings)
    calls = [log for log in logs if log["event"] == "plugin.hook_call"]
    assert [log["hook"] for log in calls] == ["ore_configure", *REGISTRATION_HOOKS, "ore_compact"]
    assert all(log["plugins"] == ["test"] for log in calls)
    assert sum(log["event"] == "plugin.hook_done" for log in logs) == len(calls)


def test_hook_calls_are_not_logged_without_trace_plugins(settings: OreSettings) -> None:
    pm = create_plugin_manager()
    with capture_logs() as logs:
        collect(pm, settings)
    assert [log for log in logs if log["event"].startswith("plugin.hook")] == []


def test_each_manager_is_fresh(ore_plugin_manager: OrePluginManager) -> None:
    ore_plugin_manager.register(StorePlugin(), name="stores")
    assert create_plugin_manager(load_entry_points=False).get_plugin("stores") is None


# --- registrations -----------------------------------------------------------------


def test_collect_registrations_gathers_what_the_test_plugin_registers(
    pm: OrePluginManager, settings: OreSettings
) -> None:
    registrations = collect(pm, settings)
    assert [i.name for i in registrations.interceptors] == ["compaction", "ore-test.pass-through"]
    assert [s.name for s in registrations.sinks] == ["ore-test.recorder"]
    assert registrations.stores["ore-test"] is ore_test_plugin.SectionStore
    assert registrations.turn_processors["ore-test-shout"] is ore_test_plugin.Shout
    assert registrations.conduit("ore-test") is ore_test_plugin.QuietConduit
    assert registrations.artifact_kinds == {"ore_test.note": ore_test_plugin.Note}
    assert registrations.tools == {"ore_test_add": ore_test_plugin.ADD}


def test_configure_hook_receives_the_settings_first(
    pm: OrePluginManager, settings: OreSettings
) -> None:
    collect(pm, settings)
    assert ore_test_plugin.calls == [("configure", settings)]


def test_configure_is_replayed_to_a_plugin_registered_later(
    ore_plugin_manager: OrePluginManager, settings: OreSettings
) -> None:
    collect(ore_plugin_manager, settings)
    with temporary_plugin(ore_plugin_manager, ore_test_plugin):
        assert ore_test_plugin.calls == [("configure", settings)]


def test_store_factory_is_built_from_its_section(
    pm: OrePluginManager, settings: OreSettings
) -> None:
    factory = collect(pm, settings).store_factory("ore-test")
    assert factory({"path": "/x"}).section == {"path": "/x"}


def test_plugin_artifact_kind_decodes_through_the_registry(
    pm: OrePluginManager, settings: OreSettings
) -> None:
    registrations = collect(pm, settings)
    decoded = registrations.artifact_registry.decode("ore_test.note", {"text": "hi"})
    assert decoded == ore_test_plugin.Note("hi")


async def test_registered_tool_is_awaited_with_the_model_arguments(
    pm: OrePluginManager, settings: OreSettings
) -> None:
    tool = collect(pm, settings).tools["ore_test_add"]
    assert await tool.call({"a": 2, "b": 3}) == 5


def test_interceptors_run_by_order_then_registration_order(
    ore_plugin_manager: OrePluginManager, ore_register_plugin: Any, settings: OreSettings
) -> None:
    ore_register_plugin(
        InterceptorPlugin(Interceptor("late", 20), Interceptor("first", 10), Interceptor("tie", 20))
    )
    names = [i.name for i in collect(ore_plugin_manager, settings).interceptors]
    assert [n for n in names if n in {"first", "late", "tie"}] == ["first", "late", "tie"]


def test_taken_store_name_is_an_error_naming_both_plugins(
    pm: OrePluginManager, settings: OreSettings
) -> None:
    with (
        temporary_plugin(pm, StorePlugin(), name="copycat"),
        pytest.raises(PluginError) as raised,
    ):
        collect(pm, settings)
    assert 'store "ore-test" is registered twice: by plugin "copycat" and by plugin "test"' in (
        str(raised.value)
    )


def test_object_missing_the_interceptor_protocol_is_rejected_naming_the_plugin(
    ore_plugin_manager: OrePluginManager, ore_register_plugin: Any, settings: OreSettings
) -> None:
    class Bad:
        @hookimpl
        def ore_register_interceptors(self, register: Any) -> None:
            register(object())

    ore_register_plugin(Bad(), name="bad")
    with pytest.raises(PluginError, match=r'plugin "bad" failed in ore_register_interceptors'):
        collect(ore_plugin_manager, settings)


@pytest.mark.parametrize(
    ("tool", "problem"),
    [
        (Tool("has space", "d", {"type": "object"}, ore_test_plugin.add), "1-64 letters"),
        (Tool("t", "d", {"type": "array"}, ore_test_plugin.add), "JSON schema object"),
        (Tool("t", "d", {"type": "object"}, "not callable"), "not callable"),  # type: ignore[arg-type]
    ],
)
def test_invalid_tool_is_rejected(tool: Tool, problem: str) -> None:
    with pytest.raises(PluginError, match=problem):
        Registrations().register_tool(tool)


def test_unknown_store_name_lists_the_registered_ones() -> None:
    registrations = Registrations()
    registrations.register_store("memory", dict)
    with pytest.raises(PluginError, match=r'no store named "sqlite" \(registered: memory\)'):
        registrations.store_factory("sqlite")


# --- lifecycle ---------------------------------------------------------------------


async def test_await_maybe_passes_values_through_and_awaits_awaitables() -> None:
    async def three() -> int:
        return 3

    assert await await_maybe(3) == 3
    assert await await_maybe(three()) == 3


async def test_startup_awaits_async_hooks_and_shutdown_calls_sync_ones(
    pm: OrePluginManager,
) -> None:
    session_manager = object()
    await startup_plugins(pm, session_manager)  # type: ignore[arg-type]
    await shutdown_plugins(pm, session_manager)  # type: ignore[arg-type]
    assert ore_test_plugin.calls == [("startup", session_manager), ("shutdown", session_manager)]


@pytest.fixture
def ok_and_bad(ore_register_plugin: Any) -> list[str]:
    """Two lifecycle plugins, `ok` and a failing `bad` (called first); their shared log."""
    log: list[str] = []
    ore_register_plugin(LifecyclePlugin(log, "ok"), name="ok")
    ore_register_plugin(LifecyclePlugin(log, "bad", fail=True), name="bad")
    return log


async def test_startup_failure_names_the_plugin_and_stops(
    ore_plugin_manager: OrePluginManager, ok_and_bad: list[str]
) -> None:
    log = ok_and_bad
    with pytest.raises(PluginError, match='plugin "bad" failed in ore_startup'):
        await startup_plugins(ore_plugin_manager, object())  # type: ignore[arg-type]
    assert log == []


async def test_shutdown_failure_does_not_skip_other_plugins(
    ore_plugin_manager: OrePluginManager, ok_and_bad: list[str]
) -> None:
    log = ok_and_bad
    with capture_logs() as logs:
        await shutdown_plugins(ore_plugin_manager, object())  # type: ignore[arg-type]
    assert log == ["ok:shutdown"]
    assert [(e["event"], e["plugin"]) for e in logs] == [("plugin.shutdown_failed", "bad")]


# --- testing kit -------------------------------------------------------------------


def test_temporary_plugin_is_unregistered_even_when_the_block_fails(
    ore_plugin_manager: OrePluginManager,
) -> None:
    plugin = StorePlugin()
    seen = []

    def fail_inside() -> None:
        with temporary_plugin(ore_plugin_manager, plugin, "stores"):
            seen.append(ore_plugin_manager.get_plugin("stores"))
            raise RuntimeError

    with pytest.raises(RuntimeError):
        fail_inside()
    assert seen == [plugin]
    assert not ore_plugin_manager.is_registered(plugin)
