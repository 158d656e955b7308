"""Fixtures for the Telegram conduit tests: the fake Bot API, a real core, the conduit.

`tg` is a `Harness`: a `FakeTelegram`, a real ore core (`CoreService` on the test's
nats-server, MemoryStore) whose processor echoes (`echo: <text>`) or plays scripted
answers, and the conduit run as `ore conduit telegram` runs it (its own client, a task).
Tests run in pytest's importlib mode: test modules import nothing from here at runtime.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from ore_conduit_telegram import TelegramConduit
from ore_conduit_telegram.testing import FakeTelegram
from ore_core import Manager, Role, Text, TextDelta, Thread, TurnContext
from ore_core.bus.server.streams import BusConfig
from ore_core.bus.service import CoreService
from ore_core.session.stores.memory import MemoryStore
from ore_core.testing.conduit_conformance import ConduitCore, KitProcessor, RunningConduit
from ore_openai.config import OpenAIConfig
from ore_openai.processor import OpenAIProcessor
from ore_openai.testing import MockOpenAIServer, MockResponse

TIMEOUT = 10.0
HOLD = object()
"""In a script, a point where the answer waits until `Script.proceed` is set."""


@dataclass
class Script:
    """An answer: text pieces streamed as deltas of `chunk` characters, `HOLD`s between."""

    pieces: list[Any]
    chunk: int = 50
    proceed: asyncio.Event = field(default_factory=asyncio.Event)
    holding: asyncio.Event = field(default_factory=asyncio.Event)


class ScriptedKit(KitProcessor):
    """The kit's echo processor, plus scripted answers keyed by the user's text."""

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
            else:
                for start in range(0, len(piece), script.chunk):
                    yield TextDelta(piece[start : start + script.chunk])


class Harness:
    """The fake Telegram, the core and the conduit of one test."""

    HOLD = HOLD

    def __init__(
        self, fake: FakeTelegram, core: ConduitCore, processor: ScriptedKit, state: Path
    ) -> None:
        self.fake = fake
        self.core = core
        self.processor = processor
        self.state = state
        self.conduit: RunningConduit | None = None
        self.webhook = ""
        self._webhook_ready = asyncio.Event()

        class TestTelegramConduit(TelegramConduit):
            pass

        TestTelegramConduit.on_webhook_ready = self._ready
        self.conduit_class = TestTelegramConduit

    def _ready(self, url: str) -> None:
        self.webhook = url
        self._webhook_ready.set()

    def script(self, said: str, *pieces: Any, **options: Any) -> Script:
        """Answer the user message `said` with `pieces` (see `Script`)."""
        script = self.processor.scripts[said] = Script(list(pieces), **options)
        return script

    async def start(self, **settings: Any) -> RunningConduit:
        """Start (or restart) the conduit with these `[plugins.telegram]` settings."""
        if self.conduit is None:
            section = self.fake.conduit_settings(str(self.state), flush_interval=0.05, **settings)
            self.conduit = RunningConduit(self.conduit_class, section, self.core.nats_url)
        polls = self.fake.polls
        self._webhook_ready.clear()
        await self.conduit.start()
        try:
            async with asyncio.timeout(TIMEOUT):
                if self.conduit.section.get("mode") == "webhook":
                    await self._webhook_ready.wait()
                else:
                    await self.fake.wait_until(lambda: self.fake.polls > polls)
        except TimeoutError:
            self.conduit.check()
            raise
        return self.conduit

    async def stop(self) -> None:
        """Stop the conduit (as SIGTERM does)."""
        assert self.conduit is not None
        await self.conduit.stop()

    async def until(self, predicate: Callable[[], bool], within: float = TIMEOUT) -> None:
        """Until `predicate()` holds (checked on every change the fake sees); a conduit
        that crashed meanwhile fails with its error."""
        try:
            await self.fake.wait_until(predicate, within)
        except TimeoutError:
            if self.conduit is not None:
                self.conduit.check()
            raise

    async def shows(self, chat: int, texts: list[str], topic: int | None = None) -> None:
        """Until the bot's messages in the chat (or topic) read `texts`, in order."""
        try:
            await self.until(lambda: self.fake.bot_texts(chat, topic) == texts)
        except TimeoutError:
            raise AssertionError(f"the chat shows {self.fake.bot_texts(chat, topic)!r}") from None

    async def threads(self) -> list[Thread]:
        """Every thread the core stores."""
        return list(await self.core.store.list())

    async def user_texts(self) -> list[list[str]]:
        """The user messages of every stored thread (active paths), sorted."""
        return sorted(
            [
                a.content
                for turn in thread.turns()
                if turn.role == Role.USER
                for a in turn.artifacts
                if isinstance(a, Text)
            ]
            for thread in await self.threads()
        )

    async def restart_core(self) -> None:
        """Start a new core service on the same store (after `core.service.stop`)."""
        self.core.service = await _core(self.core.nats_url, self.core.store, self.processor)


async def _core(nats_url: str, store: MemoryStore, processor: Any) -> CoreService:
    service = CoreService(
        Manager(store, processor),
        servers=[nats_url],
        config=BusConfig(partitions=2),
        reconnect_wait=0.05,
    )
    await service.start()
    return service


@asynccontextmanager
async def _harness(nats_url: str, state: Path, processor: Any) -> AsyncIterator[Harness]:
    """The fake, a core running `processor`, a client: a Harness, cleaned up after."""
    from ore_core.conduit import ConduitClient

    store = MemoryStore()
    service = await _core(nats_url, store, processor)
    fake = await FakeTelegram().start()
    client = await ConduitClient.connect(nats_url, name="test", reconnect_wait=0.05)
    core = ConduitCore(nats_url, store, processor, service, client)
    harness = Harness(fake, core, processor, state)
    try:
        yield harness
    finally:
        if harness.conduit is not None and harness.conduit.running:
            await harness.conduit.stop()
        await client.close()
        await fake.close()
        await harness.core.service.stop(grace=0)
        await store.close()


@pytest_asyncio.fixture
async def tg(ore_nats_url: str, tmp_path: Path) -> AsyncIterator[Harness]:
    """The harness of one test (the conduit is not started: `await tg.start()`)."""
    async with _harness(ore_nats_url, tmp_path / "state", ScriptedKit()) as harness:
        yield harness


@pytest.fixture
def model() -> Iterator[MockOpenAIServer]:
    """The OpenAI mock as the model: it answers every request `seen` and records it."""
    with MockOpenAIServer(responder=lambda body: MockResponse(text="seen")) as server:
        yield server


@pytest_asyncio.fixture
async def tg_model(
    ore_nats_url: str, tmp_path: Path, model: MockOpenAIServer
) -> AsyncIterator[Harness]:
    """A harness whose core answers with the OpenAI processor, talking to `model`."""
    config = OpenAIConfig(base_url=model.base_url, model="mock-model", max_retries=0)
    async with (
        OpenAIProcessor(config) as processor,
        _harness(ore_nats_url, tmp_path / "state", processor) as harness,
    ):
        yield harness
