"""Fixtures for the Slack conduit tests: the fake Slack, a real core, the conduit.

`slack` is a `Harness` (the test kit's `ConduitHarness`): a `FakeSlack` (with a
`FakeClock`), a real ore core whose processor echoes or plays scripted answers, and the
conduit run as `ore conduit slack` runs it (its own client, a task). The `ore_*`
fixtures come from the ore pytest kit, enabled in the repository's top-level
conftest.py. Tests run in pytest's importlib mode: test modules import nothing from here
at runtime.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest_asyncio

from ore_conduit_slack import SlackConduit
from ore_conduit_slack.testing import FakeClock, FakeMessage, FakeSlack
from ore_core.testing.conduit_conformance import ConduitCore, RunningConduit
from ore_core.testing.harness import TIMEOUT, ConduitHarness, ScriptedKit, harness_on

__all__ = ["TIMEOUT", "Harness"]


class Harness(ConduitHarness[FakeSlack]):
    """The fake Slack, the core and the conduit of one test."""

    def __init__(self, fake: FakeSlack, core: ConduitCore, processor: ScriptedKit) -> None:
        super().__init__(fake, core, processor)
        self.http_url = ""
        self._connections = 0
        self._ready = asyncio.Event()

        class TestSlackConduit(SlackConduit):
            pass

        TestSlackConduit.clock = fake.clock
        TestSlackConduit.on_http_ready = self._http_ready
        self._conduit_class = TestSlackConduit

    @property
    def conduit_class(self) -> type[SlackConduit]:
        return self._conduit_class

    def _http_ready(self, url: str) -> None:
        self.http_url = url
        self._ready.set()

    def settings(self, **settings: Any) -> dict[str, Any]:
        return dict(self.fake.conduit_settings(**settings))

    async def start(self, **settings: Any) -> RunningConduit:
        """Start (or restart) the conduit with these `[plugins.slack]` settings."""
        self._ready.clear()
        return await super().start(**settings)

    async def _until_up(self, conduit: RunningConduit) -> None:
        if conduit.section.get("mode") == "http":
            await self._ready.wait()
        else:
            self._connections += 1
            await self.fake.wait_connected(self._connections)

    async def answers(self, channel: str, root: FakeMessage | str, count: int = 1) -> list[str]:
        """The finished answers of a thread, once there are `count`."""
        ts = root if isinstance(root, str) else root.ts
        await self.until(lambda: len(self.fake.answers(channel, ts)) >= count)
        return self.fake.answers(channel, ts)

    async def settled(self, channel: str, root: FakeMessage) -> None:
        """Until the conduit has finished the thread's answers (their status is cleared)."""
        await self.wait_for(
            lambda: (
                any(s == (channel, root.ts, "") for s in self.fake.statuses)
                and self.fake.status_of(channel, root.ts) == ""
            )
        )

    async def wait_for(self, predicate: Callable[[], bool]) -> None:
        """Until `predicate()` holds (checked on every change the fake sees)."""
        await self.fake.wait_until(predicate, TIMEOUT)


@pytest_asyncio.fixture
async def slack(ore_nats_url: str) -> AsyncIterator[Harness]:
    """The harness of one test (the conduit is not started: `await slack.start()`)."""
    fake = await FakeSlack(FakeClock()).start()
    processor = ScriptedKit()

    def make(core: ConduitCore) -> Harness:
        return Harness(fake, core, processor)

    async with harness_on(make, fake, ore_nats_url, processor) as harness:
        yield harness
