"""Built-in plugins (stores, echo, slash commands, log sink) and `build_runtime`."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from structlog.testing import capture_logs

from ore_core import (
    ConfigError,
    Manager,
    PluginError,
    Role,
    StoreError,
    Text,
    Tool,
    TurnFailed,
    TurnProcessor,
    UserMessageEvent,
    hookimpl,
)
from ore_core.cli import main
from ore_core.cli.app import build_runtime
from ore_core.config import OreSettings
from ore_core.logging import configure_logging
from ore_core.plugins.builtin.log_sink import LogSink
from ore_core.plugins.manager import BUILTIN_PLUGINS, OrePluginManager, create_plugin_manager
from ore_core.plugins.registry import collect_registrations
from ore_core.session.stores import MemoryStore
from ore_core.testing.processors import ScriptedProcessor

BUILTINS = {
    "ore_core.plugins.builtin.stores": {"ore_register_stores"},
    "ore_core.bus.store.store_plugin": {"ore_register_stores"},
    "ore_core.plugins.builtin.processors": {"ore_register_turn_processors"},
    "ore_core.plugins.builtin.commands": {"ore_register_interceptors"},
    "ore_core.plugins.builtin.files": {"ore_configure", "ore_register_interceptors"},
    "ore_core.plugins.builtin.log_sink": {"ore_register_sinks"},
}
LOCAL_STORES = ["memory", "json", "journal", "sqlite"]
STORES = [*LOCAL_STORES, "jetstream"]


@pytest.fixture(autouse=True)
def _isolated(ore_isolated_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORE_LOAD_PLUGINS", "")  # no test plugins from the venv


@pytest.fixture
def pm(ore_plugin_manager: OrePluginManager) -> OrePluginManager:
    """Built-ins only; `ore_register_plugin` adds to this same manager."""
    return ore_plugin_manager


def settings(**sections: Mapping[str, Any]) -> OreSettings:
    return OreSettings(**sections)  # type: ignore[arg-type]


def store_section(name: str, tmp_path: Path) -> dict[str, Any]:
    return {"name": name} if name == "memory" else {"name": name, "path": tmp_path / "threads"}


class ProcessorPlugin:
    """Offers one turn processor factory under `name`."""

    def __init__(self, name: str, factory: Callable[..., TurnProcessor]) -> None:
        self.name = name
        self.factory = factory

    @hookimpl
    def ore_register_turn_processors(self, register: Callable[..., None]) -> None:
        register(self.name, self.factory)


async def say(manager: Manager, text: str) -> str:
    """Send `text` to a new thread, wait until it is handled; return the thread id."""
    stream = await manager.create()
    await stream.process(UserMessageEvent(content=text))
    return stream.id


# --- registration ------------------------------------------------------------------


def test_every_builtin_is_listed_by_ore_plugins_all_with_its_hook() -> None:
    result = CliRunner().invoke(main, ["plugins", "--all", "--json"])
    assert result.exit_code == 0, result.output
    listed = {entry["name"]: entry for entry in json.loads(result.stdout)}
    for name, hooks in BUILTINS.items():
        assert listed[name]["builtin"] is True
        assert set(listed[name]["hooks"]) == hooks


def test_ore_plugins_without_all_hides_the_builtins() -> None:
    result = CliRunner().invoke(main, ["plugins", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == []


def test_builtin_plugins_list_names_exactly_the_builtin_modules() -> None:
    assert set(BUILTIN_PLUGINS) == set(BUILTINS)


def test_builtins_pass_pluggys_check_pending(pm: OrePluginManager) -> None:
    pm.check_pending()
    assert pm.load_errors == []


def test_builtins_register_stores_echo_slash_commands_files_and_log_sink(
    pm: OrePluginManager,
) -> None:
    registrations = collect_registrations(pm, OreSettings())
    assert sorted(registrations.stores) == sorted(STORES)
    assert list(registrations.turn_processors) == ["echo"]
    assert [i.name for i in registrations.interceptors] == ["files", "compaction", "slash"]
    assert [s.name for s in registrations.sinks] == ["log"]


def test_empty_load_plugins_still_loads_every_builtin() -> None:
    pm = create_plugin_manager()  # with entry points, limited by ORE_LOAD_PLUGINS=""
    names = {info.name for info in pm.describe(include_builtins=True)}
    assert names == set(BUILTINS)


# --- stores ------------------------------------------------------------------------


@pytest.mark.parametrize("name", LOCAL_STORES)
async def test_a_message_through_the_runtime_is_stored_in_each_store(
    name: str, pm: OrePluginManager, tmp_path: Path
) -> None:
    config = settings(store=store_section(name, tmp_path))
    async with await build_runtime(config, pm) as runtime:
        thread_id = await say(runtime.manager, "hello store")
        stored = await runtime.store.get(thread_id)
        assert runtime.store.name == name
    assert [(turn.role, turn.artifacts) for turn in stored.turns()] == [
        (Role.USER, (Text("hello store"),)),
        (Role.ASSISTANT, (Text("hello store"),)),
    ]


async def test_the_jetstream_store_outside_ore_serve_says_it_needs_the_core_connection(
    pm: OrePluginManager,
) -> None:
    async with await build_runtime(settings(store={"name": "jetstream"}), pm) as runtime:
        with pytest.raises(StoreError, match="binds it to the core's connection"):
            await runtime.store.list_ids()


@pytest.mark.parametrize(
    ("name", "entry"), [("json", "threads"), ("journal", "journal"), ("sqlite", "threads.db")]
)
async def test_file_stores_default_to_the_user_state_directory(
    name: str, entry: str, pm: OrePluginManager, ore_isolated_env: Path
) -> None:
    async with await build_runtime(settings(store={"name": name}), pm) as runtime:
        await say(runtime.manager, "hi")
    assert (ore_isolated_env / "state" / "ore" / entry).exists()


def test_unknown_store_key_is_a_config_error_naming_the_key_and_the_known_ones(
    pm: OrePluginManager,
) -> None:
    registrations = collect_registrations(pm, OreSettings())
    with pytest.raises(ConfigError, match=r"store\.fsynk .*store 'sqlite'.*fsync"):
        registrations.store_factory("sqlite")({"name": "sqlite", "fsynk": "always"})


def test_bad_store_value_is_a_config_error_naming_the_key(pm: OrePluginManager) -> None:
    registrations = collect_registrations(pm, OreSettings())
    with pytest.raises(ConfigError, match=r"store\.fsync = 'sometimes'"):
        registrations.store_factory("journal")({"fsync": "sometimes"})


async def test_unregistered_store_name_fails_listing_the_registered_ones(
    pm: OrePluginManager,
) -> None:
    with pytest.raises(
        PluginError, match=r'no store named "nope" \(registered: jetstream, journal, json'
    ):
        await build_runtime(settings(store={"name": "nope"}), pm)


# --- processors --------------------------------------------------------------------


async def test_missing_processor_falls_back_to_echo_with_one_notice(
    pm: OrePluginManager, tmp_path: Path
) -> None:
    config = settings(store=store_section("memory", tmp_path), processor={"name": "gpt-9000"})
    with capture_logs() as logs:
        async with await build_runtime(config, pm) as runtime:
            thread_id = await say(runtime.manager, "still answered")
            turns = (await runtime.store.get(thread_id)).turns()
    (notice,) = runtime.notices
    assert 'turn processor "gpt-9000" is not installed' in notice
    assert 'answering with "echo"' in notice
    assert [log["event"] for log in logs if log["log_level"] == "warning"] == [notice]
    assert turns[-1].artifacts == (Text("still answered"),)


async def test_configured_processor_gets_its_whole_section(
    pm: OrePluginManager, ore_register_plugin: Any
) -> None:
    seen: list[Mapping[str, Any]] = []

    def factory(section: Mapping[str, Any]) -> TurnProcessor:
        seen.append(section)
        return ScriptedProcessor()

    ore_register_plugin(ProcessorPlugin("scripted", factory))
    config = settings(store={"name": "memory"}, processor={"name": "scripted", "temperature": 1})
    async with await build_runtime(config, pm) as runtime:
        assert runtime.notices == []
    assert seen == [{"name": "scripted", "temperature": 1}]


async def test_processor_factory_declaring_tools_receives_the_registered_tools(
    pm: OrePluginManager, ore_register_plugin: Any
) -> None:
    async def add(a: int, b: int) -> int:
        return a + b

    tool = Tool("add", "Add two numbers", {"type": "object", "properties": {}}, add)
    received: list[Mapping[str, Tool]] = []

    class ToolPlugin:
        @hookimpl
        def ore_register_tools(self, register: Callable[[Tool], None]) -> None:
            register(tool)

    def factory(section: Mapping[str, Any], tools: Mapping[str, Tool]) -> TurnProcessor:
        received.append(tools)
        return ScriptedProcessor()

    ore_register_plugin(ToolPlugin())
    ore_register_plugin(ProcessorPlugin("with-tools", factory))
    config = settings(store={"name": "memory"}, processor={"name": "with-tools"})
    async with await build_runtime(config, pm):
        pass
    assert received == [{"add": tool}]


# --- slash commands ----------------------------------------------------------------


async def test_slash_commands_are_intercepted_before_the_processor(
    pm: OrePluginManager,
) -> None:
    async with await build_runtime(settings(store={"name": "memory"}), pm) as runtime:
        thread_id = await say(runtime.manager, "/help")
        assert (await runtime.store.get(thread_id)).turns() == []


# --- startup and shutdown ----------------------------------------------------------


class LifecyclePlugin:
    """Async ore_startup/ore_shutdown that record what they saw."""

    def __init__(self, fail_startup: bool = False) -> None:
        self.calls: list[tuple[str, Manager]] = []
        self.fail_startup = fail_startup

    @hookimpl
    async def ore_startup(self, manager: Manager) -> None:
        self.calls.append(("startup", manager))
        if self.fail_startup:
            raise RuntimeError("no database")

    @hookimpl
    async def ore_shutdown(self, manager: Manager) -> None:
        self.calls.append(("shutdown", manager))


async def test_runtime_awaits_async_startup_and_shutdown_hooks_with_its_manager(
    pm: OrePluginManager, ore_register_plugin: Any
) -> None:
    plugin = LifecyclePlugin()
    ore_register_plugin(plugin, name="lifecycle")
    runtime = await build_runtime(settings(store={"name": "memory"}), pm)
    assert plugin.calls == [("startup", runtime.manager)]
    await runtime.aclose()
    assert plugin.calls == [("startup", runtime.manager), ("shutdown", runtime.manager)]


async def test_aclose_closes_the_store_and_is_idempotent(
    pm: OrePluginManager, ore_register_plugin: Any, tmp_path: Path
) -> None:
    plugin = LifecyclePlugin()
    ore_register_plugin(plugin, name="lifecycle")
    runtime = await build_runtime(settings(store=store_section("sqlite", tmp_path)), pm)
    await runtime.aclose()
    await runtime.aclose()
    assert [call for call, _ in plugin.calls].count("shutdown") == 1
    with pytest.raises(StoreError, match="is closed"):
        await runtime.store.list_ids()


async def test_failing_startup_hook_names_the_plugin_shuts_down_and_closes_the_store(
    pm: OrePluginManager, ore_register_plugin: Any
) -> None:
    store = MemoryStore()

    class KeptStorePlugin:
        @hookimpl
        def ore_register_stores(self, register: Callable[..., None]) -> None:
            register("kept", lambda section: store)

    plugin = LifecyclePlugin(fail_startup=True)
    ore_register_plugin(plugin, name="lifecycle")
    ore_register_plugin(KeptStorePlugin())
    with pytest.raises(PluginError, match='plugin "lifecycle" failed in ore_startup'):
        await build_runtime(settings(store={"name": "kept"}), pm)
    assert [call for call, _ in plugin.calls] == ["startup", "shutdown"]
    with pytest.raises(StoreError, match="is closed"):
        await store.list_ids()


# --- log sink ----------------------------------------------------------------------


async def test_log_sink_logs_each_finished_turn_and_done_at_debug_with_the_thread_id_never_deltas(
    pm: OrePluginManager,
) -> None:
    configure_logging("debug")
    with capture_logs() as logs:
        async with await build_runtime(settings(store={"name": "memory"}), pm) as runtime:
            thread_id = await say(runtime.manager, "several words to stream")
    events = [(log["event"], log["log_level"]) for log in logs if log.get("thread_id")]
    assert events == [
        ("turn complete", "debug"),
        ("turn complete", "debug"),
        ("turn done", "debug"),
    ]
    assert all(log["thread_id"] == thread_id for log in logs if "thread_id" in log)
    assert not any("delta" in json.dumps(log, default=str) for log in logs)


async def test_at_info_the_log_sink_logs_no_line_per_turn_and_never_sees_those_events(
    pm: OrePluginManager,
) -> None:
    configure_logging("info")
    assert LogSink().kinds == {"error"}
    with capture_logs() as logs:
        async with await build_runtime(settings(store={"name": "memory"}), pm) as runtime:
            await say(runtime.manager, "several words")
    assert [log for log in logs if log.get("thread_id")] == []


async def test_log_sink_logs_a_failed_turn_as_a_warning(
    pm: OrePluginManager, ore_register_plugin: Any
) -> None:
    ore_register_plugin(
        ProcessorPlugin("broken", lambda section: ScriptedProcessor([RuntimeError("model down")]))
    )
    config = settings(store={"name": "memory"}, processor={"name": "broken"})
    with capture_logs() as logs:
        async with await build_runtime(config, pm) as runtime:
            with pytest.raises(TurnFailed):
                await say(runtime.manager, "hi")
    (failure,) = [log for log in logs if log["event"] == "turn failed"]
    assert failure["log_level"] == "warning"
    assert "model down" in failure["message"]
    assert any(log["event"] == "turn done" for log in logs)
