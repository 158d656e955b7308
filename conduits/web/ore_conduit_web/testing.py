"""Test kit of the web conduit: a scripted model and a whole stack on loopback.

`ScriptedModel` is a turn processor that answers by prompt markers (as LibreChat's
end-to-end suite does), so browser and API tests know what each message does:

- `E2E_REPLY:x` answers `x`; `E2E_COUNTED_REPLY:x` answers `x #n`, n counting the
  answers to that prompt (a regenerated answer differs from the first);
- `E2E_SLOW_REPLY:x` streams the first half of `x`, then holds until `release()`
  (or an interrupt, counted in `cancelled`) before the rest;
- `E2E_FAIL:x` fails the turn with the message `x`;
- `E2E_REASON:x` thinks first (reasoning), then answers `x`;
- `E2E_TOOL:x` calls the tool `search` with `{"q": "x"}` in its answer, then answers `x`;
- anything else is answered `You said: <text>`.

Its `summarise` writes a compaction's summary: `summary` (Markdown, with HTML the page
must escape).

`WebStack` runs a nats-server, a core (`CoreService`, memory store) with that model
(or the `processor` given, named `processor_name`: a model server's processor, as the
model picker's tests use), with the compaction step when `compaction` settings are
given, and the web conduit serving on a free loopback port (its uploads checked
against `files`, the operator's `[files]` policy, when given), all in the caller's
event loop.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import httpx
from httpx_sse import aconnect_sse

from ore_conduit_web.conduit import WebConduit
from ore_core import Manager, Reasoning, Text, ToolCall, Turn, TurnContext
from ore_core.artifacts import Artifact, TextDelta
from ore_core.bus.server.embedded import EmbeddedNatsServer
from ore_core.bus.server.streams import BusConfig
from ore_core.bus.service import CoreService
from ore_core.conduit import ConduitClient
from ore_core.config import CompactionSettings
from ore_core.files import FilePolicy
from ore_core.session.compactor import Compactor
from ore_core.session.protocols import TurnProcessor
from ore_core.session.stores.memory import MemoryStore

__all__ = [
    "TIMEOUT",
    "Events",
    "ScriptedModel",
    "WebStack",
    "answered",
    "properties_stored",
    "read_events",
]

TIMEOUT = 10.0

_CHUNK = 3


class ScriptedModel:
    """A turn processor driven by markers in the user's message (see the module)."""

    def __init__(self) -> None:
        self.summary = 'Decided: **ship it**. <img src=x onerror="window.injected = 1">'
        self.answered: Counter[str] = Counter()
        self.cancelled = 0
        self.started = 0
        self.holding = asyncio.Event()
        self._release = asyncio.Event()
        self._began = asyncio.Event()

    def release(self) -> None:
        """Let the held slow answer (and every later one) finish."""
        self._release.set()

    async def wait_for_turns(self, count: int) -> None:
        """Until `count` turns have started in all (bound it with a timeout)."""
        while self.started < count:
            self._began.clear()
            await self._began.wait()

    def hold_again(self) -> None:
        """Make the next slow answer hold again."""
        self._release.clear()
        self.holding.clear()

    async def summarise(self, turns: Sequence[Turn], prompt: str, model: str) -> str:
        """A compaction's summary of `turns` (the compaction step asks the processor)."""
        return self.summary

    async def __call__(self, ctx: TurnContext) -> None:
        said = " ".join(a.content for a in ctx.turns()[-1].artifacts if isinstance(a, Text))
        self.started += 1
        self._began.set()
        try:
            await ctx.step(self._answer(said))
        except asyncio.CancelledError:
            self.cancelled += 1
            raise

    async def _answer(self, said: str) -> AsyncIterator[Artifact]:
        marker, _, rest = said.partition(":")
        if marker == "E2E_FAIL":
            raise RuntimeError(rest or "scripted failure")
        if marker == "E2E_REASON":
            yield Reasoning("Let me think about it.")
        if marker == "E2E_TOOL":
            yield ToolCall(id="call-1", name="search", arguments=json.dumps({"q": rest}))
        if marker == "E2E_SLOW_REPLY":
            half = len(rest) // 2
            for piece in _pieces(rest[:half]):
                yield TextDelta(piece)
            self.holding.set()
            await self._release.wait()
            for piece in _pieces(rest[half:]):
                yield TextDelta(piece)
            return
        if marker == "E2E_COUNTED_REPLY":
            self.answered[rest] += 1
            text = f"{rest} #{self.answered[rest]}"
        elif marker in ("E2E_REPLY", "E2E_REASON", "E2E_TOOL"):
            text = rest
        else:
            text = f"You said: {said}"
        for piece in _pieces(text):
            yield TextDelta(piece)


def _pieces(text: str) -> list[str]:
    return [text[i : i + _CHUNK] for i in range(0, len(text), _CHUNK)]


class WebStack:
    """nats-server, core and web conduit on loopback; `url` is the signed-in page URL."""

    def __init__(
        self,
        directory: Path,
        *,
        processor: TurnProcessor | None = None,
        processor_name: str = "scripted",
        compaction: CompactionSettings | None = None,
        files: FilePolicy | None = None,
        **settings: Any,
    ) -> None:
        self.directory = directory
        self.files = files
        self.processor = processor
        self.processor_name = processor_name
        self.compaction = compaction
        self.settings = {"host": "127.0.0.1", "port": 0, "state_dir": str(directory / "web")}
        self.settings.update(settings)
        self.model = ScriptedModel()
        self.url = ""
        self.base = ""
        self.token = ""
        self._nats: EmbeddedNatsServer | None = None
        self._service: CoreService | None = None
        self._client: ConduitClient | None = None
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Self:
        self._nats = EmbeddedNatsServer(self.directory / "nats")
        await asyncio.to_thread(self._nats.start)
        self.nats_url = self._nats.url
        interceptors = [Compactor(self.compaction)] if self.compaction is not None else []
        manager = Manager(MemoryStore(), self.processor or self.model, interceptors=interceptors)
        self._service = CoreService(
            manager,
            servers=[self.nats_url],
            config=BusConfig(partitions=2),
            reconnect_wait=0.05,
            processor_name=self.processor_name,
        )
        await self._service.start()
        await self.start_conduit()
        return self

    async def start_conduit(self) -> None:
        """Start the conduit (again, after `stop_conduit`)."""
        ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()

        class Conduit(WebConduit):
            pass

        def on_ready(url: str) -> None:
            if not ready.done():
                ready.set_result(url)

        Conduit.on_ready = on_ready
        config = Conduit.load_config(self.settings)
        self._client = await ConduitClient.connect(self.nats_url, name="web", reconnect_wait=0.05)
        if self.files is not None:  # the operator's [files], as `ore conduit` sets it
            self._client.files.policy = self.files
        task = self._task = asyncio.create_task(Conduit().run(self._client, config))
        async with asyncio.timeout(TIMEOUT):
            waiting: list[asyncio.Future[Any]] = [ready, task]
            await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            task.result()
        self.url = ready.result()
        self.base, _, query = self.url.partition("/?token=")
        self.base = self.base.rstrip("/")
        self.token = query

    async def stop_conduit(self) -> None:
        """Stop the conduit as SIGTERM does."""
        task, client = self._task, self._client
        self._task = self._client = None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        if client is not None:
            await client.close()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.model.release()
        await self.stop_conduit()
        if self._service is not None:
            await self._service.stop(grace=0)
        if self._nats is not None:
            await asyncio.to_thread(self._nats.stop)


class Events:
    """The frames of one thread's event stream, read until a condition holds."""

    def __init__(self) -> None:
        self.frames: list[tuple[str, str, dict[str, Any]]] = []  # (event, id, data)

    def stored(self) -> list[tuple[str, dict[str, Any]]]:
        return [(i, d) for e, i, d in self.frames if e == "stored"]

    def kinds(self) -> list[str]:
        return [str(d.get("kind")) for _, d in self.stored()]


async def read_events(
    http: httpx.AsyncClient,
    thread_id: str,
    until: Any,
    *,
    after: str | None = None,
    last_event_id: str | None = None,
    events: Events | None = None,
) -> Events:
    """Read the thread's SSE stream into `events` until `until(events)` is true."""
    events = events or Events()
    headers = {"Last-Event-ID": last_event_id} if last_event_id else {}
    params = {"after": after} if after else {}
    async with aconnect_sse(
        http, "GET", f"/api/threads/{thread_id}/events", params=params, headers=headers
    ) as source:
        async for sse in source.aiter_sse():
            events.frames.append((sse.event, sse.id, json.loads(sse.data) if sse.data else {}))
            if until(events):
                return events
    raise AssertionError("the event stream ended early")


def answered(count: int = 1) -> Any:
    """`until` for `read_events`: `count` turns ended (stored `lifecycle` done)."""

    def check(events: Events) -> bool:
        done = [d for _, d in events.stored() if d.get("kind") == "lifecycle"]
        return sum(1 for d in done if d.get("phase") == "done") >= count

    return check


def properties_stored(key: str) -> Any:
    """`until` for `read_events`: a stored `properties` event changed `key` (a link's
    settings, `ore.gateway.label`, are stored once the link is in place)."""

    def check(events: Events) -> bool:
        return any(
            op.get("key") == key
            for _, d in events.stored()
            if d.get("kind") == "properties"
            for op in d.get("operations", [])
        )

    return check
