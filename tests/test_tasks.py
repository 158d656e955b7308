"""TaskScope: every background task has an owner that waits for it and hears of its crash."""

from __future__ import annotations

import asyncio

import pytest
from structlog.testing import capture_logs

from ore_core.tasks import Crash, TaskCrashed, TaskScope


async def _forever() -> None:
    await asyncio.Event().wait()


async def _crash(after: asyncio.Event | None = None) -> None:
    if after is not None:
        await after.wait()
    raise RuntimeError("boom")


async def test_a_crash_is_logged_once_with_the_task_name_and_cancels_its_siblings() -> None:
    crashes: list[Crash] = []
    scope = TaskScope("svc", on_crash=crashes.append)
    with capture_logs() as logs:
        sibling = scope.spawn(_forever(), name="svc-sibling")
        scope.spawn(_crash(), name="svc-loop")
        await asyncio.wait([sibling], timeout=10)
    assert sibling.cancelled()
    assert [c.task for c in crashes] == ["svc-loop"]
    assert scope.crash is crashes[0]
    crashed = [entry for entry in logs if entry["event"] == "background task crashed"]
    assert len(crashed) == 1
    assert crashed[0]["task"] == "svc-loop"
    assert crashed[0]["log_level"] == "error"
    assert isinstance(crashed[0]["exc_info"], RuntimeError)


async def test_aclose_of_a_root_scope_reraises_the_crash_instead_of_discarding_it() -> None:
    scope = TaskScope("svc")
    task = scope.spawn(_crash(), name="svc-loop")
    await asyncio.wait([task])
    with pytest.raises(TaskCrashed) as raised:
        await scope.aclose()
    assert raised.value.crash.task == "svc-loop"
    assert "svc-loop" in str(raised.value)
    assert isinstance(raised.value.crash.error, RuntimeError)


async def test_aclose_without_a_crash_cancels_and_waits_for_every_task() -> None:
    scope = TaskScope("svc")
    tasks = [scope.spawn(_forever(), name=f"t{n}") for n in range(3)]
    await scope.aclose()
    assert all(task.done() for task in tasks)
    assert len(scope) == 0
    with pytest.raises(RuntimeError, match="closed"):
        scope.spawn(_forever(), name="late")


async def test_a_child_crash_reaches_the_root_which_reports_it_once() -> None:
    root_crashes: list[Crash] = []
    root = TaskScope("core", on_crash=root_crashes.append)
    child = root.child("ingress")
    other = root.child("pipeline")
    other_task = other.spawn(_forever(), name="pipeline-send")
    task = child.spawn(_crash(), name="ingress-ack")
    await asyncio.wait([task])
    assert [c.task for c in root_crashes] == ["ingress-ack"]
    assert root.crash is not None
    assert root.crash.scope == "core/ingress"
    # The owner stops its other parts in order: a sibling scope is not cancelled for it.
    assert not other_task.done()
    await child.aclose()  # a child never raises: its parent reports
    with pytest.raises(TaskCrashed):
        await root.aclose()
    assert other_task.cancelled()


async def test_adopting_a_scope_that_already_crashed_fails_the_parent() -> None:
    child = TaskScope("manager")
    await asyncio.wait([child.spawn(_crash(), name="ore-sink-x")])
    root = TaskScope("core")
    root.adopt(child)
    assert root.crash is child.crash
    with pytest.raises(TaskCrashed):
        await root.aclose()


async def test_spawning_after_a_crash_is_refused_with_the_crash() -> None:
    scope = TaskScope("svc")
    await asyncio.wait([scope.spawn(_crash(), name="svc-loop")])
    coroutine = _forever()
    with pytest.raises(TaskCrashed):
        scope.spawn(coroutine, name="late")
    assert coroutine.cr_frame is None  # closed, so no "never awaited" warning


async def test_a_job_failure_is_logged_and_nothing_else_stops() -> None:
    scope = TaskScope("bridge")
    loop_task = scope.spawn(_forever(), name="bridge-loop")
    with capture_logs() as logs:
        job = scope.spawn(_crash(), name="respond-1", critical=False)
        await asyncio.wait([job])
    assert scope.crash is None
    assert not loop_task.done()
    assert [e["task"] for e in logs if e["event"] == "background job failed"] == ["respond-1"]
    await scope.aclose()


async def test_a_crash_raised_by_the_body_of_async_with_is_not_raised_twice() -> None:
    async def body() -> None:
        async with TaskScope("feed") as scope:
            await asyncio.wait([scope.spawn(_crash(), name="ore-feed-x")])
            scope.raise_crash()

    with pytest.raises(TaskCrashed) as raised:
        await body()
    assert raised.value.__context__ is None
