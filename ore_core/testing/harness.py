"""One test's conduit harness: a platform's fake, a real core with scripted answers, the
conduit run as `ore conduit NAME` runs it.

Every platform conduit's tests need the same parts: a core on the test's nats-server
(`CoreService`, a `MemoryStore`) whose processor echoes or plays an answer scripted for
the user's text, a client, the conduit as a task, and waits on what the fake shows.
They are written once here; a conduit's conftest keeps only how its fake starts and how
it knows the conduit is up (`ConduitHarness.start`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from ore_core.artifacts import Text, TextDelta
from ore_core.conduit.base import Conduit
from ore_core.conduit.client import ConduitClient
from ore_core.ledger.thread import Thread
from ore_core.session.stores.memory import MemoryStore
from ore_core.session.turn_context import TurnContext
from ore_core.testing.conduit_conformance import (
    ConduitCore,
    KitProcessor,
    RunningConduit,
    start_core,
)
from ore_core.turn import Role

__all__ = [
    "HOLD",
    "TIMEOUT",
    "ConduitHarness",
    "Script",
    "ScriptedKit",
    "WaitingFake",
    "harness_on",
    "start_core",
]

TIMEOUT = 10.0
"""Seconds a harness waits for what a fake should show: a bound on a hang, never a pace."""

HOLD = object()
"""In a script, a point where the answer waits until `Script.proceed` is set."""


@dataclass
class Script:
    """An answer: text pieces streamed as deltas of `chunk` characters, `HOLD`s between.

    At a `HOLD` the answer sets `holding` and waits for `proceed` (both are then
    cleared). An exception in `pieces` is raised there (a failed turn). `pause` puts
    seconds between deltas, for a test of pacing; 0 goes as fast as the core goes.
    """

    pieces: list[Any]
    chunk: int = 4
    pause: float = 0.0
    proceed: asyncio.Event = field(default_factory=asyncio.Event)
    holding: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def text(self) -> str:
        """The whole answer."""
        return "".join(p for p in self.pieces if isinstance(p, str))


class ScriptedKit(KitProcessor):
    """The kit's processor (echo, `gate()`), plus answers scripted by the user's text."""

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


class WaitingFake(Protocol):
    """What a harness needs of a platform's fake: a wait on what it shows, a close."""

    async def wait_until(self, predicate: Callable[[], bool], within: float, /) -> None: ...

    async def close(self) -> None: ...


F = TypeVar("F", bound=WaitingFake)


class ConduitHarness(Generic[F]):
    """The fake, the core and the conduit of one test; a conduit's conftest subclasses it
    with `conduit_class`, `settings` (its section from the fake) and `_until_up`."""

    HOLD = HOLD

    def __init__(self, fake: F, core: ConduitCore, processor: Any) -> None:
        self.fake = fake
        self.core = core
        self.processor = processor
        self.conduit: RunningConduit | None = None

    @property
    def conduit_class(self) -> type[Conduit]:
        """The conduit under test (a subclass wired to the test, where it needs one)."""
        raise NotImplementedError

    def settings(self, **settings: Any) -> dict[str, Any]:
        """The conduit's section for this fake, with the test's `settings`."""
        raise NotImplementedError

    async def _until_up(self, conduit: RunningConduit) -> None:
        """Until the started conduit is connected to the fake (its own sign)."""
        raise NotImplementedError

    def script(self, said: str, *pieces: Any, **options: Any) -> Script:
        """Answer the user message `said` with `pieces` (see `Script`)."""
        script = self.processor.scripts[said] = Script(list(pieces), **options)
        return script

    async def start(self, **settings: Any) -> RunningConduit:
        """Start (or restart: the same section) the conduit with these settings."""
        if self.conduit is None:
            section = self.settings(**settings)
            self.conduit = RunningConduit(self.conduit_class, section, self.core.nats_url)
        conduit = self.conduit
        await conduit.start()
        try:
            async with asyncio.timeout(TIMEOUT):
                await self._until_up(conduit)
        except TimeoutError:
            conduit.check()
            raise
        return conduit

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
        """Stop the core (if it runs) and start a new one on the same store."""
        await self.core.service.stop(grace=0)
        self.core.service = await start_core(self.core.nats_url, self.core.store, self.processor)


H = TypeVar("H", bound=ConduitHarness[Any])


@asynccontextmanager
async def harness_on(
    make: Callable[[ConduitCore], H], fake: WaitingFake, nats_url: str, processor: Any
) -> AsyncIterator[H]:
    """A harness (`make(core)`) over a core running `processor` on `nats_url`, with a
    client; the conduit, the client, `fake`, the core and the store closed after."""
    store = MemoryStore()
    service = await start_core(nats_url, store, processor)
    client = await ConduitClient.connect(nats_url, name="test", reconnect_wait=0.05)
    harness = make(ConduitCore(nats_url, store, processor, service, client))
    try:
        yield harness
    finally:
        if harness.conduit is not None and harness.conduit.running:
            await harness.conduit.stop()
        await client.close()
        await fake.close()
        await harness.core.service.stop(grace=0)
        await store.close()
