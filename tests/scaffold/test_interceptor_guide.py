"""The interceptor guide's edit, applied to what `ore new interceptor` generates, makes
the interceptor the guide says it makes (issue 43)."""

from __future__ import annotations

from pathlib import Path

from ore_core import Manager, Role, Text, UserMessageEvent
from ore_core.scaffold import PluginNames, plan, write
from ore_core.session.stores.memory import MemoryStore
from ore_core.testing.processors import ScriptedProcessor
from tests.scaffold.guides import diff_of, patched


async def test_the_interceptor_guides_edit_applies_to_the_generated_file_and_calms_shouting(
    generated: Path,
) -> None:
    write(plan("interceptor", PluginNames.of("no-shouting")), generated, force=True)
    plugin_py = generated / "ore_no_shouting" / "plugin.py"
    plugin_py.write_text(patched(plugin_py.read_text(), diff_of("writing-an-interceptor.md")))
    from ore_no_shouting.plugin import NoShoutingInterceptor  # type: ignore[import-not-found]

    processor = ScriptedProcessor(["ok"])
    interceptors = [NoShoutingInterceptor()]
    async with Manager(MemoryStore(), processor, interceptors=interceptors) as manager:
        stream = await manager.create()
        await stream.process(UserMessageEvent(content="HELLO THERE"))
        said = [turn.artifacts for turn in stream.turns() if turn.role == Role.USER]
    assert said == [(Text("Hello there"),)]
