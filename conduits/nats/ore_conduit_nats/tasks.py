"""The bridge's background work: tracked tasks, and jobs kept in order per channel."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

import structlog

__all__ = ["SerialByKey", "TaskSet"]

log = structlog.get_logger("ore.conduit.nats")

T = TypeVar("T")
_Job = Callable[[], Awaitable[None]]


class TaskSet:
    """Tasks that outlive the callback that started them; `aclose` cancels and awaits all.

    A task that fails is logged (a bridge keeps serving other messages).
    """

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()

    def spawn(self, coroutine: Coroutine[Any, Any, T], name: str) -> asyncio.Task[T]:
        """Run `coroutine` as a tracked task."""
        task = asyncio.get_running_loop().create_task(coroutine, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._finished)
        return task

    def _finished(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("bridge task failed", task=task.get_name(), exc_info=task.exception())

    async def aclose(self) -> None:
        """Cancel every task and wait until all have ended."""
        while self._tasks:
            tasks = list(self._tasks)
            for task in tasks:
                task.cancel()
            await asyncio.wait(tasks)


class SerialByKey:
    """Runs jobs with the same key one after another, in the order they were submitted.

    Jobs of different keys run concurrently. This keeps a channel's messages in order
    on their way to the core while one slow channel never holds up another.
    """

    def __init__(self, tasks: TaskSet) -> None:
        self._tasks = tasks
        self._last: dict[str, asyncio.Task[None]] = {}

    def submit(self, key: str, job: _Job) -> None:
        """Queue `job` behind the jobs already queued for `key`."""
        task = self._tasks.spawn(self._after(self._last.get(key), job), name=f"bridge-{key}")
        self._last[key] = task
        task.add_done_callback(lambda done: self._forget(key, done))

    @staticmethod
    async def _after(
        previous: asyncio.Task[None] | None, job: Callable[[], Awaitable[None]]
    ) -> None:
        if previous is not None:
            await asyncio.wait([previous])
        await job()

    def _forget(self, key: str, task: asyncio.Task[None]) -> None:
        if self._last.get(key) is task:
            del self._last[key]
