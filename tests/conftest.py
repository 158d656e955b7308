"""Fixtures shared by the core's test directories."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import structlog


@pytest.fixture(autouse=True)
def _default_logging() -> Iterator[None]:
    """Each test ends with structlog's defaults: the CLI, run in process, configures
    logging process-wide, and the next test must not log through its set-up."""
    yield
    structlog.reset_defaults()


@pytest.fixture
async def tasks_started() -> AsyncIterator[list[str]]:
    """Names of the coroutines of every task started on the running loop meanwhile."""
    started: list[str] = []
    loop = asyncio.get_running_loop()
    previous = loop.get_task_factory()

    def counting(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
        started.append(getattr(coro, "__qualname__", repr(coro)))
        return asyncio.Task(coro, loop=loop, **kwargs)

    loop.set_task_factory(counting)
    yield started
    loop.set_task_factory(previous)
