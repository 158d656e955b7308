"""docs/hooks.md covers every hook, and each example registers and works as written."""

from __future__ import annotations

import re
import sys
import types
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from ore_core import (
    Manager,
    OreSettings,
    Role,
    Text,
    UserMessageEvent,
)
from ore_core.artifacts import ArtifactRegistry
from ore_core.plugins.manager import (
    HOOK_NAMES,
    OrePluginManager,
    shutdown_plugins,
    startup_plugins,
)
from ore_core.plugins.registry import Registrations, collect_registrations
from ore_core.session.stores import MemoryStore
from ore_core.testing.plugins import temporary_plugin
from tests.docs.support import DOCS, load_module, page_blocks, python_blocks
from tests.session.support import message

PAGE = (DOCS / "hooks.md").read_text()
SECTIONS = dict(re.findall(r"^## (ore_\w+)\(.*?\)\n(.*?)(?=^## |\Z)", PAGE, re.S | re.M))


def registrations_with(pm: OrePluginManager, **plugins: dict[str, Any]) -> Registrations:
    return collect_registrations(
        pm, OreSettings(plugins=plugins), artifact_registry=ArtifactRegistry([Text])
    )


def example(hook: str) -> types.ModuleType:
    """The section's one code block, loaded as a module of its own."""
    (code,) = python_blocks(SECTIONS[hook])
    return load_module(f"docs_hooks_{hook}", code)


@pytest.fixture(scope="module", autouse=True)
def _folder_store_module() -> None:
    # The store example imports the store built in writing-a-store.md.
    if "folder_store" not in sys.modules:
        load_module("folder_store", page_blocks("writing-a-store.md")[0])


def test_every_hookspec_has_a_section_and_every_section_is_a_hookspec() -> None:
    assert sorted(SECTIONS) == sorted(HOOK_NAMES)


def test_the_sections_follow_the_order_of_hookspecs_py() -> None:
    from ore_core.plugins import hookspecs

    declared = [name for name in vars(hookspecs) if name.startswith("ore_")]
    assert list(SECTIONS) == declared


@pytest.mark.parametrize("hook", HOOK_NAMES)
def test_each_example_implements_exactly_its_hook(
    hook: str, ore_plugin_manager: OrePluginManager
) -> None:
    module = example(hook)
    with temporary_plugin(ore_plugin_manager, module):  # checks hook names like start-up
        callers = ore_plugin_manager.get_hookcallers(module) or []
        assert [caller.name for caller in callers] == [hook]
        assert ore_plugin_manager.get_name(module) in ore_plugin_manager.hook_implementers()[hook]


# What each example's registration does, checked the way ore uses it.


async def configure(pm: OrePluginManager, module: types.ModuleType, tmp_path: Path) -> None:
    registrations_with(pm, greeter={"text": "Hi"})
    assert module.greeting == {"text": "Hi"}


async def interceptors(pm: OrePluginManager, module: types.ModuleType, tmp_path: Path) -> None:
    (interceptor,) = [i for i in registrations_with(pm).interceptors if i.name == "no-shouting"]
    result = await interceptor.intercept(UserMessageEvent(content="HELLO"), None)  # type: ignore[arg-type]
    assert isinstance(result.event, UserMessageEvent)
    assert result.event.content == "Hello"
    assert [notice.content for notice in result.notices] == ["No need to shout."]


async def sinks(pm: OrePluginManager, module: types.ModuleType, tmp_path: Path) -> None:
    (sink,) = [s for s in registrations_with(pm).sinks if s.name == "kind-counter"]
    async with Manager(MemoryStore(), _parrot(), sinks=[sink]) as manager:
        stream = await manager.create()
        await stream.process(message("hi"))
        await manager.aclose()
    assert sink.counts["turn_complete"] == 2  # type: ignore[attr-defined]


async def stores(pm: OrePluginManager, module: types.ModuleType, tmp_path: Path) -> None:
    factory = registrations_with(pm).store_factory("folder")
    store = factory({"name": "folder", "path": str(tmp_path)})
    assert isinstance(store, sys.modules["folder_store"].FolderStore)
    thread = await store.create()
    assert (await store.get(thread.id)).id == thread.id
    await store.close()


async def turn_processors(pm: OrePluginManager, module: types.ModuleType, tmp_path: Path) -> None:
    processor = registrations_with(pm).turn_processor_factory("parrot")({"name": "parrot"})
    async with Manager(MemoryStore(), processor) as manager:
        stream = await manager.create()
        await stream.process(message("hello"))
        answer = [turn.artifacts for turn in stream.turns() if turn.role == Role.ASSISTANT]
    assert answer == [(Text("Polly: hello"),)]


async def conduits(pm: OrePluginManager, module: types.ModuleType, tmp_path: Path) -> None:
    conduit = registrations_with(pm).conduit("printer")
    assert conduit is module.Printer


async def artifact_kinds(pm: OrePluginManager, module: types.ModuleType, tmp_path: Path) -> None:
    registrations = registrations_with(pm)
    assert registrations.artifact_kinds == {"cite.citation": module.Citation}
    citation = module.Citation(url="https://example.org", title="Example")
    assert registrations.artifact_registry.decode(citation.kind, citation.to_dict()) == citation


async def tools(pm: OrePluginManager, module: types.ModuleType, tmp_path: Path) -> None:
    tool = registrations_with(pm).tools["roll_die"]
    assert await tool.call({"sides": 2}) in (1, 2)


async def commands(pm: OrePluginManager, module: types.ModuleType, tmp_path: Path) -> None:
    cli = click.Group("ore")
    pm.hook.ore_register_commands(cli=cli)
    result = CliRunner().invoke(cli, ["greet", "World"])
    assert (result.exit_code, result.output) == (0, "Hello, World!\n")


async def compact(pm: OrePluginManager, module: types.ModuleType, tmp_path: Path) -> None:
    (compactor,) = [i for i in registrations_with(pm).interceptors if i.name == "compaction"]
    async with Manager(MemoryStore(), _parrot(), interceptors=[compactor]) as manager:
        stream = await manager.create()
        for number in range(6):
            await stream.process(message(f"message {number}\nsecond line " + "x" * 200))
        await stream.process(message("/compact"))
        summary = stream.turns()[0]
    assert summary.role == Role.SYSTEM
    assert "Earlier the user said:\n- message 1\n- message 2" in summary.artifacts[0].content  # type: ignore[attr-defined]


async def startup(pm: OrePluginManager, module: types.ModuleType, tmp_path: Path) -> None:
    async with Manager(MemoryStore(), _parrot()) as manager:
        await startup_plugins(pm, manager)
        lobby = await manager.get_by("lobby.name", "lobby")
        await startup_plugins(pm, manager)  # a restart finds the same thread
        assert [thread.id for thread in await manager.list_threads()] == [lobby.id]


async def shutdown(pm: OrePluginManager, module: types.ModuleType, tmp_path: Path) -> None:
    async with Manager(MemoryStore(), _parrot()) as manager:
        await manager.create()
        await manager.create()
        await shutdown_plugins(pm, manager)


EFFECTS: dict[str, Callable[[OrePluginManager, types.ModuleType, Path], Awaitable[None]]] = {
    "ore_configure": configure,
    "ore_register_interceptors": interceptors,
    "ore_register_sinks": sinks,
    "ore_register_stores": stores,
    "ore_register_turn_processors": turn_processors,
    "ore_register_conduits": conduits,
    "ore_register_artifact_kinds": artifact_kinds,
    "ore_register_tools": tools,
    "ore_register_commands": commands,
    "ore_compact": compact,
    "ore_startup": startup,
    "ore_shutdown": shutdown,
}


def _parrot() -> Any:
    return example("ore_register_turn_processors").parrot({})


def test_every_hook_has_an_effect_check() -> None:
    assert sorted(EFFECTS) == sorted(HOOK_NAMES)


@pytest.mark.parametrize("hook", HOOK_NAMES)
async def test_each_example_takes_effect_through_a_real_plugin_manager(
    hook: str, ore_plugin_manager: OrePluginManager, tmp_path: Path
) -> None:
    module = example(hook)
    with temporary_plugin(ore_plugin_manager, module):
        await EFFECTS[hook](ore_plugin_manager, module, tmp_path)


async def test_the_shutdown_example_reports_the_live_threads(
    ore_plugin_manager: OrePluginManager, capsys: pytest.CaptureFixture[str]
) -> None:
    module = example("ore_shutdown")
    with temporary_plugin(ore_plugin_manager, module):
        await shutdown(ore_plugin_manager, module, Path())
    assert "stopping with 2 live threads" in capsys.readouterr().err
