"""The pluggy plugin: entry point, processor registration, tool selection."""

from __future__ import annotations

from importlib.metadata import entry_points

import pytest

import ore_openai.plugin
from ore_core import Tool
from ore_core.plugins.manager import OrePluginManager
from ore_core.plugins.registry import Registrations
from ore_openai.errors import OpenAIConfigError
from ore_openai.plugin import create_processor
from ore_openai.processor import OpenAIProcessor


async def ping() -> str:
    return "pong"


async def pong() -> str:
    return "ping"


TOOLS = [Tool("ping", "", {"type": "object"}, ping), Tool("pong", "", {"type": "object"}, pong)]


def test_the_ore_entry_point_loads_the_plugin_module() -> None:
    (entry_point,) = [ep for ep in entry_points(group="ore") if ep.name == "openai"]
    assert entry_point.load() is ore_openai.plugin


def test_the_plugin_registers_the_openai_processor_factory() -> None:
    manager = OrePluginManager()
    manager.register(ore_openai.plugin, "openai")
    registrations = Registrations()
    manager.hook.ore_register_turn_processors(register=registrations.register_turn_processor)
    factory = registrations.turn_processor_factory("openai")
    processor = factory({"name": "openai", "model": "llama3.2"})
    assert isinstance(processor, OpenAIProcessor)
    assert processor.config.model == "llama3.2"


def test_all_registered_tools_are_offered_by_default() -> None:
    assert set(create_processor({}, TOOLS).tools) == {"ping", "pong"}


def test_the_tools_setting_picks_the_offered_tools() -> None:
    assert list(create_processor({"tools": ["pong"]}, TOOLS).tools) == ["pong"]


def test_a_tools_setting_naming_an_unregistered_tool_is_rejected() -> None:
    with pytest.raises(OpenAIConfigError, match="tools weather are not registered"):
        create_processor({"tools": ["weather"]}, TOOLS)
