"""Hold a store's SerialWorker busy so that calls queue up behind it, then let it go."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from ore_core.session.stores.worker import SerialWorker

TIMEOUT = 30.0


class Gate:
    """Holds the worker thread inside one call until opened."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.released = threading.Event()

    def hold(self) -> None:
        self.entered.set()
        self.released.wait(TIMEOUT)

    async def occupy(self, worker: SerialWorker) -> asyncio.Task[None]:
        """Occupy `worker`; returns once it is inside the gate."""
        task = asyncio.create_task(worker.run(self.hold))
        assert await asyncio.to_thread(self.entered.wait, TIMEOUT)
        return task


async def until(condition: Callable[[], bool]) -> None:
    """Let the loop run until `condition` holds (the calls under test are queued).

    The tasks put their calls on the worker's queue in their first step: yielding to
    the loop is what lets them, and a queue has no event to await.
    """
    async with asyncio.timeout(TIMEOUT):
        while not condition():  # noqa: ASYNC110
            await asyncio.sleep(0)


async def queued_together(
    worker: SerialWorker, calls: Sequence[Callable[[], Awaitable[Any]]]
) -> list[Any]:
    """Start `calls` while the worker is busy, so it takes them all in one go.

    Returns each call's result or exception, in order.
    """
    gate = Gate()
    held = await gate.occupy(worker)
    tasks = [asyncio.ensure_future(call()) for call in calls]
    await until(lambda: worker._queue.qsize() == len(calls))
    gate.released.set()
    await held
    return await asyncio.gather(*tasks, return_exceptions=True)
