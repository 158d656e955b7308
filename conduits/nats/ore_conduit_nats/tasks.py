"""The bridge's per-channel order: jobs of one channel run one after another.

The jobs are tasks of the bridge's `TaskScope` (`ore_core.TaskScope`), spawned as
jobs (`critical=False`): one that fails is logged with its name and the bridge keeps
serving other messages; closing the scope cancels and awaits them all.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from ore_core import TaskScope

__all__ = ["SerialByKey"]

_Job = Callable[[], Awaitable[None]]


class SerialByKey:
    """Runs jobs with the same key one after another, in the order they were submitted.

    Jobs of different keys run concurrently. This keeps a channel's messages in order
    on their way to the core while one slow channel never holds up another.
    """

    def __init__(self, tasks: TaskScope) -> None:
        self._tasks = tasks
        self._last: dict[str, asyncio.Task[None]] = {}

    def submit(self, key: str, job: _Job) -> None:
        """Queue `job` behind the jobs already queued for `key`."""
        task = self._tasks.spawn(
            self._after(self._last.get(key), job), name=f"bridge-{key}", critical=False
        )
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
