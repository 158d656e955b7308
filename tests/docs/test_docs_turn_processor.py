"""The turn processor built in docs/writing-a-turn-processor.md works as the page says."""

from __future__ import annotations

import pytest

from ore_core import (
    ArtifactEvent,
    ConfigError,
    LifecycleEvent,
    Manager,
    OreSettings,
    Role,
    Text,
    TextDelta,
    TurnCompleteEvent,
)
from ore_core.plugins.manager import OrePluginManager
from ore_core.plugins.registry import collect_registrations
from ore_core.session.stores import MemoryStore
from ore_core.testing.plugins import temporary_plugin
from tests.docs.support import load_module, page_blocks
from tests.session.support import collect, message

(_FIRST_EXPERIMENT, PROCESSOR_CODE) = page_blocks("writing-a-turn-processor.md")
shout = load_module("shout_processor", PROCESSOR_CODE)


def describe(event: object) -> object:
    """The page's way of naming what a subscriber sees."""
    if isinstance(event, LifecycleEvent):
        return f"lifecycle: {event.phase}"
    if isinstance(event, ArtifactEvent):
        return event.artifact
    if isinstance(event, TurnCompleteEvent):
        return f"turn_complete: {event.turn.role}"
    return event


async def test_the_registered_shout_processor_streams_what_the_page_describes(
    ore_plugin_manager: OrePluginManager,
) -> None:
    with temporary_plugin(ore_plugin_manager, shout):
        registrations = collect_registrations(ore_plugin_manager, OreSettings())
    processor = registrations.turn_processor_factory("shout")({"name": "shout"})
    async with Manager(MemoryStore(), processor) as manager:
        stream = await manager.create()
        async with stream.subscribe() as events:
            await stream.process(message("hello there"))
            seen = [describe(event) for event in await collect(events)]
        assert seen == [
            "turn_complete: user",
            "lifecycle: submitted",
            "lifecycle: streaming",
            TextDelta("Message"),
            TextDelta(" 1:"),
            TextDelta(" HELLO"),
            TextDelta(" THERE"),
            Text("Message 1: HELLO THERE"),
            "turn_complete: assistant",
            "lifecycle: done",
        ]
        await stream.process(message("again"))
        stored = await manager.store.get(stream.id)
    answers = [turn.artifacts for turn in stored.turns() if turn.role == Role.ASSISTANT]
    assert answers == [(Text("Message 1: HELLO THERE"),), (Text("Message 2: AGAIN"),)]


def test_the_shout_factory_reads_delay_from_an_environment_string() -> None:
    assert shout.shout_processor({"name": "shout", "delay": "0.2"}).delay == 0.2


def test_the_shout_factory_names_a_bad_delay() -> None:
    with pytest.raises(ConfigError, match=r"processor\.delay"):
        shout.shout_processor({"name": "shout", "delay": "soon"})
