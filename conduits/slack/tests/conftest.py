"""Fixtures for the Slack conduit tests: the fake Slack, a real core, the conduit.

`slack` is a `Harness`: a `FakeSlack` (with a `FakeClock`), a real ore core
(`CoreService` on the test's nats-server, MemoryStore) whose processor plays scripted
answers, and the conduit run as `ore conduit slack` runs it (its own client, a task).
The `ore_*` fixtures come from the ore pytest kit, enabled in the repository's top-level
conftest.py. Tests run in pytest's importlib mode: test modules import nothing from here
at runtime.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest_asyncio

from ore_conduit_slack import SlackConduit
from ore_conduit_slack.testing import FakeClock, FakeMessage, FakeSlack
from ore_core import Manager, Role, Text, TextDelta, Thread, TurnContext
from ore_core.bus.server.streams import BusConfig
from ore_core.bus.service import CoreService
from ore_core.session.stores.memory import MemoryStore
from ore_core.testing.conduit_conformance import ConduitCore, KitProcessor, RunningConduit

TIMEOUT = 10.0
HOLD = object()
"""In a script, a point where the answer waits until `Script.proceed` is set."""


@dataclass
class Script:
    """An answer: text pieces streamed as deltas of `chunk` characters, `HOLD`s between.

    At a `HOLD` the answer sets `holding` and waits for `proceed` (both are then cleared).

    An exception in `pieces` is raised there (a failed turn).
    """

    pieces: list[Any]
    chunk: int = 4
    pause: float = 0.0  # seconds between deltas (0: as fast as the core goes)
    proceed: asyncio.Event = field(default_factory=asyncio.Event)
    holding: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def text(self) -> str:
        """The whole answer."""
        return "".join(p for p in self.pieces if isinstance(p, str))


class ScriptedKit(KitProcessor):
    """The kit's processor (echo, `gate()`), plus scripted answers keyed by the user's text."""

    def __init__(self) -> None:
        super().__init__()
        self.scripts: dict[str, Script] = {}

    async def __call__(self, ctx: TurnContext) -> None:
        said = " ".join(a.content for a in ctx.turns()[-1].artifacts if isinstance(a, Text))
        script = self.scripts.get(said)
        if self.gated is not None or script is None:
            await super().__call__(ctx)
            return
        await ctx.step(self._stream(script))

    async def _stream(self, script: Script) -> AsyncIterator[TextDelta]:
        for piece in script.pieces:
            if piece is HOLD:
                script.holding.set()
                await script.proceed.wait()
                script.proceed.clear()
                script.holding.clear()
            elif isinstance(piece, BaseException):
                raise piece
            else:
                for start in range(0, len(piece), script.chunk):
                    yield TextDelta(piece[start : start + script.chunk])
                    if script.pause:
                        await asyncio.sleep(script.pause)


class Harness:
    """The fake Slack, the core and the conduit of one test."""

    HOLD = HOLD

    def __init__(self, fake: FakeSlack, core: ConduitCore, processor: ScriptedKit) -> None:
        self.fake = fake
        self.core = core
        self.processor = processor
        self.conduit: RunningConduit | None = None
        self.http_url = ""
        clock = fake.clock

        class TestSlackConduit(SlackConduit):
            pass

        TestSlackConduit.clock = clock
        TestSlackConduit.on_http_ready = self._http_ready
        self.conduit_class = TestSlackConduit
        self._connections = 0
        self._ready = asyncio.Event()

    def _http_ready(self, url: str) -> None:
        self.http_url = url
        self._ready.set()

    def script(self, said: str, *pieces: Any, **options: Any) -> Script:
        """Answer the user message `said` with `pieces` (see `Script`)."""
        script = self.processor.scripts[said] = Script(list(pieces), **options)
        return script

    async def start(self, **settings: Any) -> RunningConduit:
        """Start (or restart) the conduit with these `[plugins.slack]` settings."""
        if self.conduit is None:
            section = self.fake.conduit_settings(**settings)
            self.conduit = RunningConduit(self.conduit_class, section, self.core.nats_url)
        self._ready.clear()
        await self.conduit.start()
        async with asyncio.timeout(TIMEOUT):
            if self.conduit.section.get("mode") == "http":
                await self._ready.wait()
            else:
                self._connections += 1
                await self.fake.wait_connected(self._connections)
        return self.conduit

    async def stop(self) -> None:
        """Stop the conduit (as SIGTERM does)."""
        assert self.conduit is not None
        await self.conduit.stop()

    async def answers(self, channel: str, root: FakeMessage | str, count: int = 1) -> list[str]:
        """The finished answers of a thread, once there are `count`."""
        ts = root if isinstance(root, str) else root.ts

        def enough() -> bool:
            return len(self.fake.answers(channel, ts)) >= count

        try:
            await self.fake.wait_until(enough, TIMEOUT)
        except TimeoutError:
            if self.conduit is not None:
                self.conduit.check()
            raise
        return self.fake.answers(channel, ts)

    async def settled(self, channel: str, root: FakeMessage) -> None:
        """Until the conduit has finished the thread's answers (their status is cleared)."""
        await self.wait_for(
            lambda: (
                any(s == (channel, root.ts, "") for s in self.fake.statuses)
                and self.fake.status_of(channel, root.ts) == ""
            )
        )

    async def threads(self) -> list[Thread]:
        """Every thread the core stores."""
        return list(await self.core.store.list())

    async def user_texts(self) -> list[list[str]]:
        """The user messages of every stored thread (active paths)."""
        return [
            [
                a.content
                for turn in thread.turns()
                if turn.role == Role.USER
                for a in turn.artifacts
                if isinstance(a, Text)
            ]
            for thread in await self.threads()
        ]

    async def restart_core(self) -> None:
        """Stop the core service and start a new one on the same store."""
        await self.core.service.stop(grace=0)
        self.core.service = await _core(self.core.nats_url, self.core.store, self.processor)

    async def wait_for(self, predicate: Callable[[], bool]) -> None:
        """Until `predicate()` holds (checked on every change the fake sees)."""
        await self.fake.wait_until(predicate, TIMEOUT)


async def _core(nats_url: str, store: MemoryStore, processor: ScriptedKit) -> CoreService:
    service = CoreService(
        Manager(store, processor),
        servers=[nats_url],
        config=BusConfig(partitions=2),
        reconnect_wait=0.05,
    )
    await service.start()
    return service


@pytest_asyncio.fixture
async def slack(ore_nats_url: str) -> AsyncIterator[Harness]:
    """The harness of one test (the conduit is not started: `await slack.start()`)."""
    from ore_core.conduit import ConduitClient

    store = MemoryStore()
    processor = ScriptedKit()
    nats_url = ore_nats_url
    service = await _core(nats_url, store, processor)
    fake = await FakeSlack(FakeClock()).start()
    client = await ConduitClient.connect(nats_url, name="test", reconnect_wait=0.05)
    harness = Harness(fake, ConduitCore(nats_url, store, processor, service, client), processor)
    try:
        yield harness
    finally:
        if harness.conduit is not None and harness.conduit.running:
            await harness.conduit.stop()
        await client.close()
        await fake.close()
        await harness.core.service.stop(grace=0)
        await store.close()
