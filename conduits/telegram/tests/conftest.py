"""Fixtures for the Telegram conduit tests: the fake Bot API, a real core, the conduit.

`tg` is a `Harness` (the test kit's `ConduitHarness`): a `FakeTelegram`, a real ore
core whose processor echoes (`echo: <text>`) or plays scripted answers, and the conduit
run as `ore conduit telegram` runs it (its own client, a task). `tg_model` answers with
the OpenAI processor talking to the OpenAI mock instead. Tests run in pytest's
importlib mode: test modules import nothing from here at runtime.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from ore_conduit_telegram import TelegramConduit
from ore_conduit_telegram.testing import FakeTelegram
from ore_core.testing.conduit_conformance import ConduitCore, RunningConduit
from ore_core.testing.harness import TIMEOUT, ConduitHarness, Script, ScriptedKit, harness_on
from ore_openai.config import OpenAIConfig
from ore_openai.processor import OpenAIProcessor
from ore_openai.testing import MockOpenAIServer, MockResponse

__all__ = ["TIMEOUT", "Harness"]


class Harness(ConduitHarness[FakeTelegram]):
    """The fake Telegram, the core and the conduit of one test."""

    def __init__(self, fake: FakeTelegram, core: ConduitCore, processor: Any, state: Path) -> None:
        super().__init__(fake, core, processor)
        self.state = state
        self.webhook = ""
        self._webhook_ready = asyncio.Event()
        self._polls = 0

        class TestTelegramConduit(TelegramConduit):
            pass

        TestTelegramConduit.on_webhook_ready = self._ready
        self._conduit_class = TestTelegramConduit

    @property
    def conduit_class(self) -> type[TelegramConduit]:
        return self._conduit_class

    def _ready(self, url: str) -> None:
        self.webhook = url
        self._webhook_ready.set()

    def script(self, said: str, *pieces: Any, **options: Any) -> Script:
        """Answer the user message `said` with `pieces` (see `Script`; 50-character
        deltas unless `chunk` says otherwise)."""
        return super().script(said, *pieces, **({"chunk": 50} | options))

    def settings(self, **settings: Any) -> dict[str, Any]:
        return dict(self.fake.conduit_settings(str(self.state), flush_interval=0.05, **settings))

    async def start(self, **settings: Any) -> RunningConduit:
        """Start (or restart) the conduit with these `[plugins.telegram]` settings."""
        self._polls = self.fake.polls
        self._webhook_ready.clear()
        return await super().start(**settings)

    async def _until_up(self, conduit: RunningConduit) -> None:
        if conduit.section.get("mode") == "webhook":
            await self._webhook_ready.wait()
        else:
            await self.fake.wait_until(lambda: self.fake.polls > self._polls)

    async def shows(self, chat: int, texts: list[str], topic: int | None = None) -> None:
        """Until the bot's messages in the chat (or topic) read `texts`, in order."""
        try:
            await self.until(lambda: self.fake.bot_texts(chat, topic) == texts)
        except TimeoutError:
            raise AssertionError(f"the chat shows {self.fake.bot_texts(chat, topic)!r}") from None


@asynccontextmanager
async def _harness(nats_url: str, state: Path, processor: Any) -> AsyncIterator[Harness]:
    fake = await FakeTelegram().start()

    def make(core: ConduitCore) -> Harness:
        return Harness(fake, core, processor, state)

    async with harness_on(make, fake, nats_url, processor) as harness:
        yield harness


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
