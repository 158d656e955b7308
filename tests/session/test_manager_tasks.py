"""The Manager owns its sink tasks and stream workers: a crash is logged, stops it, is raised."""

from __future__ import annotations

import asyncio

import pytest
from structlog.testing import capture_logs

from ore_core import Manager, OutputEvent
from ore_core.session.fanout import EventBuffer
from ore_core.session.stores.memory import MemoryStore
from ore_core.tasks import TaskCrashed
from ore_core.testing.processors import ScriptedProcessor
from tests.session.support import message

WAIT = 10.0  # only bounds a hang


async def _ignore(thread_id: str, event: OutputEvent) -> None:
    return None


async def test_a_crashed_sink_task_is_logged_stops_the_manager_and_aclose_raises_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    manager = Manager(MemoryStore(), ScriptedProcessor(["Hello"]))
    crashed = asyncio.Event()

    async def broken_get(self: EventBuffer[object]) -> object:
        crashed.set()
        raise RuntimeError("injected: the sink loop itself is broken")

    manager.register_sink((), _ignore, name="probe")
    stream = await manager.create()
    with capture_logs() as logs:
        monkeypatch.setattr(EventBuffer, "get", broken_get)
        stream.submit(message("hi"))
        await asyncio.wait_for(crashed.wait(), WAIT)
        await asyncio.sleep(0)  # the task's done callback runs on the next loop turn
    monkeypatch.undo()
    crash = manager.tasks.crash
    assert crash is not None
    assert crash.task == "ore-sink-probe"
    assert [e["task"] for e in logs if e["event"] == "background task crashed"] == [
        "ore-sink-probe"
    ]
    # Stopped, not half alive: the stream's worker was cancelled with it, and nothing
    # new starts.
    assert len(manager.tasks) == 0
    with pytest.raises(TaskCrashed):
        stream.submit(message("again"))
    with pytest.raises(TaskCrashed, match="ore-sink-probe"):
        await manager.aclose()


async def test_a_manager_without_a_crash_closes_quietly() -> None:
    manager = Manager(MemoryStore(), ScriptedProcessor(["Hello"]))
    manager.register_sink((), _ignore, name="probe")
    stream = await manager.create()
    await stream.process(message("hi"))
    await manager.aclose()
    assert manager.tasks.crash is None
    assert len(manager.tasks) == 0
