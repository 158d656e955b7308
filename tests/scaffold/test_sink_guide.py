"""The sink guide's edit, applied to what `ore new sink` generates, makes the audit log
the guide says it makes (issue 43)."""

from __future__ import annotations

import json
from pathlib import Path

from ore_core import Manager, UserMessageEvent
from ore_core.scaffold import PluginNames, plan, write
from ore_core.session.stores.memory import MemoryStore
from ore_core.testing.processors import ScriptedProcessor
from tests.scaffold.guides import diff_of, patched


async def test_the_sink_guides_edit_applies_to_the_generated_file_and_logs_each_turn(
    generated: Path,
) -> None:
    write(plan("sink", PluginNames.of("audit")), generated, force=True)
    plugin_py = generated / "ore_audit" / "plugin.py"
    plugin_py.write_text(patched(plugin_py.read_text(), diff_of("writing-a-sink.md")))
    from ore_audit.plugin import AuditSink  # type: ignore[import-not-found]

    sink = AuditSink(generated / "audit.jsonl")
    async with Manager(MemoryStore(), ScriptedProcessor(["ok"]), sinks=[sink]) as manager:
        stream = await manager.create()
        await stream.process(UserMessageEvent(content="hello"))
    lines = (generated / "audit.jsonl").read_text().splitlines()
    logged = [(line.split(" ", 1)[0], json.loads(line.split(" ", 1)[1])["kind"]) for line in lines]
    assert logged == [(stream.id, "turn_complete")] * 2
