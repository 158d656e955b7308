"""Fixtures for the Matrix adapter's tests: the fake homeserver and adapters on it.

`hs` is a started `FakeMatrix`; `adapters` makes `MatrixPlatform`s connected to it with
one state directory per test, so a second adapter is the first one restarted; each
adapter's events are read by a task into a queue (`Adapter.next()`), and everything is
closed after the test. Tests run in pytest's importlib mode: test modules import
nothing from here at runtime.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest_asyncio

from ore_conduit_matrix import MatrixConfig, MatrixPlatform
from ore_conduit_matrix.testing import FakeMatrix
from ore_core.conduit import Inbound

TIMEOUT = 10.0


class Adapter:
    """A connected MatrixPlatform whose events are read into a queue."""

    def __init__(self, platform: MatrixPlatform) -> None:
        self.platform = platform
        self.queue: asyncio.Queue[Inbound] = asyncio.Queue()
        self.reader: asyncio.Task[None] | None = None

    def read(self) -> Adapter:
        async def pump() -> None:
            async for event in self.platform.events():
                await self.queue.put(event)

        self.reader = asyncio.create_task(pump())
        return self

    async def next(self) -> Inbound:
        async with asyncio.timeout(TIMEOUT):
            return await self.queue.get()

    async def close(self) -> None:
        if self.reader is not None:
            self.reader.cancel()
            await asyncio.gather(self.reader, return_exceptions=True)
        await self.platform.close()


Adapters = Callable[..., Awaitable[Adapter]]


@pytest_asyncio.fixture
async def hs() -> AsyncIterator[FakeMatrix]:
    fake = await FakeMatrix().start()
    try:
        yield fake
    finally:
        await fake.close()


@pytest_asyncio.fixture
async def adapters(hs: FakeMatrix, tmp_path: Path) -> AsyncIterator[Adapters]:
    """`await adapters(**settings)`: a connected adapter (reading events unless
    `read=False`: once its sync waits for news); the settings add to the fake's."""
    made: list[Adapter] = []

    async def make(*, read: bool = True, **settings: Any) -> Adapter:
        section = hs.conduit_settings(str(tmp_path / "state"), sync_timeout=5000, **settings)
        platform = MatrixPlatform(MatrixConfig.model_validate(section))
        adapter = Adapter(platform)
        made.append(adapter)
        await platform.connect()
        if read:
            adapter.read()
            await hs.wait_until(lambda: hs.waiting > 0)  # past the first sync, waiting
        return adapter

    try:
        yield make
    finally:
        for adapter in made:
            await adapter.close()
