"""Fixtures for the Discord adapter tests: the fake Discord and a connected adapter.

`discord` is a `Harness`: a running `FakeDiscord` and a `DiscordPlatform` connected to
it, whose events are collected in a queue by a task (as the engine would read them).
Tests run in pytest's importlib mode: test modules import nothing from here at runtime.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest_asyncio

from ore_conduit_discord import DiscordConfig, DiscordPlatform
from ore_conduit_discord.testing import GENERAL, TOKEN, FakeDiscord
from ore_core.conduit import Inbound

TIMEOUT = 10.0


class Harness:
    """The fake and one connected adapter; `next_event` waits for the adapter's next."""

    def __init__(self, fake: FakeDiscord, state: Path) -> None:
        self.fake = fake
        self.state = state
        self.platform: DiscordPlatform | None = None
        self.inbox: asyncio.Queue[Inbound] = asyncio.Queue()
        self._reader: asyncio.Task[None] | None = None

    def config(self, **settings: Any) -> DiscordConfig:
        values: dict[str, Any] = {
            "token": TOKEN,
            "api_url": f"{self.fake.url}/api/v10",
            "state_dir": self.state,
            "webhooks": {GENERAL: self.fake.webhook_url},
            "identify_delay": 0,
        }
        return DiscordConfig(**(values | settings))

    def platform_for(self, **settings: Any) -> DiscordPlatform:
        return DiscordPlatform(self.config(**settings))

    async def start(self, **settings: Any) -> DiscordPlatform:
        await self.stop()
        self.platform = self.platform_for(**settings)
        await self.platform.connect()
        self._reader = asyncio.create_task(self._read(self.platform))
        assert self.platform.gateway is not None
        await asyncio.wait_for(self.platform.gateway.ready.wait(), TIMEOUT)
        return self.platform

    async def _read(self, platform: DiscordPlatform) -> None:
        async for event in platform.events():
            await self.inbox.put(event)

    async def next_event(self) -> Inbound:
        return await asyncio.wait_for(self.inbox.get(), TIMEOUT)

    async def stop(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
            await asyncio.gather(self._reader, return_exceptions=True)
            self._reader = None
        if self.platform is not None:
            await self.platform.close()
            self.platform = None


@pytest_asyncio.fixture
async def discord(tmp_path: Path) -> AsyncIterator[Harness]:
    async with FakeDiscord() as fake:
        harness = Harness(fake, tmp_path / "state")
        try:
            yield harness
        finally:
            await harness.stop()
