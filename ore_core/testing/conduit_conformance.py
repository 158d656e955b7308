"""The conduit conformance kit: what every conduit must do, as inheritable tests.

A conduit package proves itself by subclassing `ConduitConformance` in its own tests,
naming its conduit class and saying how to drive a fake of its platform::

    from ore_core.testing.conduit_conformance import ConduitConformance, ConduitCore

    class TestRoomConduit(ConduitConformance):
        conduit_class = RoomConduit

        async def open_platform(self, core: ConduitCore) -> FakePlatform:
            return await FakeRoom.start()          # e.g. a local HTTP server

        def conduit_config(self, platform: FakePlatform) -> dict[str, Any]:
            return {"base_url": platform.url}       # the [plugins.room] table

pytest then runs every `test_*` below against a real nats-server, a real ore core
(`CoreService` over a `MemoryStore`; its processor answers `echo: <text>`, or holds
a turn open for the interrupt check) and the conduit running as an asyncio task with
its own `ConduitClient`, exactly as `ore conduit NAME` runs it. Platforms that
cannot interrupt, or conduits without durable output, turn those checks off with
the class flags.

The fixtures `ore_conduit_core` (that core) and `ore_start_conduit` (run a conduit, stopped
after the test) are also available to a conduit's own tests once the suite opts in
to the kit (`pytest_plugins = ["ore_core.testing"]`).
"""

from __future__ import annotations

import asyncio
import contextvars
import re
import secrets
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

import pytest
import pytest_asyncio

from ore_core.artifacts import Text
from ore_core.bus.server.streams import BusConfig
from ore_core.bus.service import CoreService
from ore_core.conduit.base import Conduit, ConduitConfig, ConduitConfigError
from ore_core.conduit.client import ConduitClient
from ore_core.events import EventContext, LifecycleEvent, UserMessageEvent, new_event_id
from ore_core.ledger.thread import Thread
from ore_core.session.echo import EchoProcessor
from ore_core.session.manager import Manager
from ore_core.session.protocols import TurnProcessor
from ore_core.session.stores.memory import MemoryStore
from ore_core.session.turn_context import TurnContext
from ore_core.testing.processors import GatedProcessor
from ore_core.turn import Role

__all__ = [
    "ECHO_PREFIX",
    "ConduitConformance",
    "ConduitCore",
    "FakePlatform",
    "KitProcessor",
    "RunningConduit",
    "StartConduit",
    "Stopped",
    "ore_bus_config",
    "ore_conduit_core",
    "ore_start_conduit",
]

ECHO_PREFIX = "echo: "
"""The core of the kit answers every message with this prefix and the message's text."""
TIMEOUT = 10.0
"""Seconds the kit waits for a reply, a turn or a shutdown before failing."""
_TASK_GRACE = 1.0  # seconds a conduit's tasks get to finish after its run() returned
_NAME = re.compile(r"[A-Za-z0-9_-]+")


class FakePlatform(Protocol):
    """What the kit needs from a stand-in for the conduit's platform.

    `conversation` is a short name the kit picks (letters, digits, `-`); the fake maps
    it to a conversation of its platform (a channel, a chat, a thread), creating it on
    first use. Replies are the messages the conduit posts into a conversation. The
    kit bounds every wait with its own timeout (cancelling the call).
    """

    async def wait_until_ready(self) -> None:
        """Return once the conduit listens to the platform (it may just have started)."""

    async def post_user_message(self, conversation: str, text: str, message_id: str) -> None:
        """Deliver a user's message; the same `message_id` means the same platform message."""

    async def wait_for_reply(self, conversation: str) -> str:
        """The oldest reply in `conversation` not returned before, waiting for one."""

    async def interrupt(self, conversation: str) -> None:
        """Do what a user does on the platform to stop the reply being written."""

    async def close(self) -> None:
        """Release what the fake holds (connections, servers)."""


class KitProcessor:
    """Answers `echo: <text>`; after `gate()` every turn waits on a `GatedProcessor` instead."""

    def __init__(self) -> None:
        self.gated: GatedProcessor | None = None
        self._echo = EchoProcessor(ECHO_PREFIX)

    def gate(self) -> GatedProcessor:
        """Hold the following turns open until released or cancelled."""
        self.gated = GatedProcessor()
        return self.gated

    async def __call__(self, ctx: TurnContext) -> None:
        await (self.gated or self._echo)(ctx)


@dataclass
class ConduitCore:
    """A running ore core on a private nats-server, and a client of the kit's own."""

    nats_url: str
    store: MemoryStore
    processor: KitProcessor
    service: CoreService
    client: ConduitClient

    async def thread_holding(self, text: str) -> Thread:
        """The one thread with a user message `text` (fails if none or several).

        Active threads are read live: a turn is saved once, when it ends, so the user
        message of a turn still running is not in the store yet.
        """
        threads = {thread.id: thread for thread in await self.store.list()}
        for stream in self.service.manager.list():
            threads[stream.id] = stream.state()
        found = [thread for thread in threads.values() if text in _user_texts(thread)]
        assert len(found) == 1, f"{len(found)} threads hold the user message {text!r}"
        return found[0]

    def client_for(self, namespace: str) -> ConduitClient:
        """A client of namespace `namespace` on the kit's connection (no credentials here)."""
        return ConduitClient(self.client.nc, name=namespace, request_timeout=TIMEOUT)

    async def converse(self, thread_id: str, text: str, *, provenance: str) -> None:
        """Send `text` to the thread as the conduit of namespace `provenance`; return when
        it is answered (or rejected: a thread of another namespace is unknown to it)."""
        client = self.client_for(provenance)
        context = EventContext(provenance=provenance, traceparent=_new_traceparent())
        event = UserMessageEvent(id=new_event_id(), content=text, context=context)
        async with client.events(thread_id, kinds={"lifecycle"}) as feed:
            await client.send(thread_id, event)
            await _until(feed, lambda e: e.phase == "done" and e.context == context)


def _user_texts(thread: Thread) -> list[str]:
    """The user messages on the thread's active path, oldest first."""
    return [
        a.content
        for turn in thread.turns()
        if turn.role == Role.USER
        for a in turn.artifacts
        if isinstance(a, Text)
    ]


def _new_traceparent() -> str:
    """A unique W3C traceparent, so the kit can tell its own message's events apart."""
    return f"00-{secrets.token_hex(16)}-{secrets.token_hex(8)}-00"


async def _until(feed: AsyncIterator[Any], accept: Callable[[LifecycleEvent], bool]) -> None:
    """Read lifecycle events from `feed` until one is accepted (TIMEOUT at most)."""
    async with asyncio.timeout(TIMEOUT):
        async for delivery in feed:
            if isinstance(delivery.event, LifecycleEvent) and accept(delivery.event):
                return


@dataclass(frozen=True)
class Stopped:
    """How a conduit stopped: seconds from cancel to return, and tasks it left running."""

    seconds: float
    leftovers: list[str] = field(default_factory=list)


_IN_CONDUIT: contextvars.ContextVar[bool] = contextvars.ContextVar("in_conduit", default=False)
"""Set in the conduit task's context; every task it (or its callbacks) creates inherits it."""


class _TaskTracker:
    """Remembers the tasks created in a conduit's context, through the loop's task factory.

    The core of the kit runs in the same event loop, so "tasks created meanwhile" would
    include the core's; the context variable tells the conduit's own apart.
    """

    def __init__(self) -> None:
        self.tasks: weakref.WeakSet[asyncio.Task[Any]] = weakref.WeakSet()
        self._loop = asyncio.get_running_loop()
        self._previous = self._loop.get_task_factory()
        self._loop.set_task_factory(self._create)

    def _create(
        self, loop: asyncio.AbstractEventLoop, coro: Any, **options: Any
    ) -> asyncio.Future[Any]:
        if self._previous is not None:
            task = self._previous(loop, coro, **options)
        else:
            task = asyncio.Task(coro, loop=loop, **options)
        if _IN_CONDUIT.get() and isinstance(task, asyncio.Task):
            self.tasks.add(task)
        return task

    def close(self) -> None:
        """Give the loop its previous task factory back."""
        self._loop.set_task_factory(self._previous)


class RunningConduit:
    """A conduit run as `ore conduit` runs it: its own client, a task, cancel to stop.

    `start()` may follow `stop()`: a new client and a new instance, like a new process.
    """

    def __init__(
        self, conduit_class: type[Conduit], section: Mapping[str, Any], nats_url: str
    ) -> None:
        self.conduit_class = conduit_class
        self.section = dict(section)
        self.nats_url = nats_url
        self.client: ConduitClient | None = None
        self.task: asyncio.Task[None] | None = None
        self._tracker: _TaskTracker | None = None

    @property
    def running(self) -> bool:
        """True from `start()` until `stop()`."""
        return self.task is not None

    async def start(self) -> None:
        """Connect a client named after the conduit and start `run` as a task."""
        config = self.conduit_class.load_config(self.section)
        self.client = await ConduitClient.connect(
            self.nats_url,
            name=self.conduit_class.name,
            request_timeout=5.0,
            send_deadline=TIMEOUT,
            reconnect_wait=0.05,
        )
        # The connection's reply inbox is made by its first request: before the tracking,
        # as it belongs to the client (closed with it), not to the conduit.
        await self.client.health()
        self._tracker = _TaskTracker()
        context = contextvars.copy_context()
        context.run(_IN_CONDUIT.set, True)
        self.task = asyncio.get_running_loop().create_task(
            self.conduit_class().run(self.client, config),
            name=f"conduit-{self.conduit_class.name}",
            context=context,
        )

    def check(self) -> None:
        """Raise the conduit's failure if `run` has ended on its own."""
        if self.task is not None and self.task.done() and not self.task.cancelled():
            error = self.task.exception()
            raise AssertionError(f"conduit {self.conduit_class.name} stopped: {error!r}") from error

    async def stop(self) -> Stopped:
        """Cancel `run`, wait for it (TIMEOUT at most), note leftover tasks, close the client."""
        task, client, tracker = self.task, self.client, self._tracker
        assert task is not None, "the conduit is not running"
        assert client is not None
        assert tracker is not None
        self.task = self.client = self._tracker = None
        started = time.monotonic()
        task.cancel()
        try:
            await asyncio.wait([task], timeout=TIMEOUT)
            seconds = time.monotonic() - started
            assert task.done(), (
                f"conduit did not return within {TIMEOUT}s of being cancelled; it waits in:\n"
                + _stack_of(task)
            )
            if not task.cancelled() and task.exception() is not None:
                raise AssertionError("conduit run() failed") from task.exception()
            leftovers = await _leftovers(set(tracker.tasks) - {task})
        finally:
            tracker.close()
            await client.close()
        return Stopped(seconds, leftovers)


def _stack_of(task: asyncio.Task[Any]) -> str:
    """Where `task` waits: its chain of awaits, outermost first."""
    lines = []
    awaited: Any = task.get_coro()
    while awaited is not None:
        frame = getattr(awaited, "cr_frame", None) or getattr(awaited, "ag_frame", None)
        if frame is None:
            lines.append(f"  awaiting {awaited!r}")
            break
        lines.append(f"  {frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}")
        awaited = getattr(awaited, "cr_await", None) or getattr(awaited, "ag_await", None)
    return "\n".join(lines)


async def _leftovers(tasks: set[asyncio.Task[Any]]) -> list[str]:
    """Where the conduit's tasks still running after a short grace wait."""
    running = [task for task in tasks if not task.done()]
    if running:
        await asyncio.wait(running, timeout=_TASK_GRACE)
    return sorted(f"{t.get_name()}:\n{_stack_of(t)}" for t in running if not t.done())


async def start_core(
    nats_url: str,
    store: MemoryStore,
    processor: TurnProcessor,
    config: BusConfig | None = None,
) -> CoreService:
    """A core on `nats_url` over `store` (two partitions unless `config` says), reconnecting
    fast."""
    service = CoreService(
        Manager(store, processor),
        servers=[nats_url],
        config=config or BusConfig(partitions=2),
        reconnect_wait=0.05,
    )
    await service.start()
    return service


@pytest.fixture
def ore_bus_config() -> BusConfig:
    """The bus configuration of `ore_conduit_core`; a test module overrides this fixture
    to run the core with other settings (say `files_link_base`)."""
    return BusConfig(partitions=2)


@pytest_asyncio.fixture
async def ore_conduit_core(
    ore_nats_url: str, ore_bus_config: BusConfig
) -> AsyncIterator[ConduitCore]:
    """A running ore core (MemoryStore, `KitProcessor`) on the test's nats-server."""
    store = MemoryStore()
    processor = KitProcessor()
    service = await start_core(ore_nats_url, store, processor, ore_bus_config)
    try:
        client = await ConduitClient.connect(ore_nats_url, name="conformance", reconnect_wait=0.05)
        async with client:
            yield ConduitCore(ore_nats_url, store, processor, service, client)
    finally:
        await service.stop(grace=0)
        await store.close()


StartConduit = Callable[[type[Conduit], Mapping[str, Any]], Awaitable[RunningConduit]]


@pytest_asyncio.fixture
async def ore_start_conduit(ore_conduit_core: ConduitCore) -> AsyncIterator[StartConduit]:
    """`await ore_start_conduit(ConduitClass, section)`: a started `RunningConduit`.

    It talks to `ore_conduit_core`; every conduit still running is stopped after the test.
    """
    started: list[RunningConduit] = []

    async def start(conduit_class: type[Conduit], section: Mapping[str, Any]) -> RunningConduit:
        conduit = RunningConduit(conduit_class, section, ore_conduit_core.nats_url)
        await conduit.start()
        started.append(conduit)
        return conduit

    yield start
    for conduit in reversed(started):  # each restores the task factory the one before set
        if conduit.running:
            await conduit.stop()


class ConduitConformance:
    """Inherit, set `conduit_class` and implement `open_platform`; the tests below then run.

    Flags: `supports_interrupt` (the platform has a way to stop a reply),
    `delivers_missed_output` (replies made while the conduit was down arrive after a
    restart), `renders_only_own_output` (output of other conduits' messages is not
    shown). Replies must contain the core's answer (`echo: <text>`); they may add to it.
    """

    pytestmark = [pytest.mark.asyncio]

    conduit_class: ClassVar[type[Conduit]]
    supports_interrupt: ClassVar[bool] = True
    delivers_missed_output: ClassVar[bool] = True
    renders_only_own_output: ClassVar[bool] = True

    async def open_platform(self, core: ConduitCore) -> FakePlatform:
        """A fake of the platform, ready for the conduit to connect to."""
        raise NotImplementedError("subclasses of ConduitConformance implement open_platform")

    def conduit_config(self, platform: FakePlatform) -> Mapping[str, Any]:
        """The conduit's `[plugins.<name>]` table for talking to `platform`."""
        return {}

    @pytest_asyncio.fixture
    async def platform(self, ore_conduit_core: ConduitCore) -> AsyncIterator[FakePlatform]:
        """The fake platform of the test, closed after the conduit stopped."""
        platform = await self.open_platform(ore_conduit_core)
        try:
            yield platform
        finally:
            await platform.close()

    @pytest_asyncio.fixture
    async def conduit(
        self, ore_start_conduit: StartConduit, platform: FakePlatform
    ) -> RunningConduit:
        """The conduit under test, running and listening to `platform`."""
        conduit = await ore_start_conduit(self.conduit_class, self.conduit_config(platform))
        await self._until_ready(conduit, platform)
        return conduit

    async def _until_ready(self, conduit: RunningConduit, platform: FakePlatform) -> None:
        try:
            async with asyncio.timeout(TIMEOUT):
                await platform.wait_until_ready()
        except TimeoutError:
            conduit.check()
            raise

    async def reply(self, conduit: RunningConduit, platform: FakePlatform, to: str) -> str:
        """The next reply in conversation `to`; a crashed conduit fails with its error."""
        try:
            async with asyncio.timeout(TIMEOUT):
                return await platform.wait_for_reply(to)
        except TimeoutError:
            conduit.check()
            raise

    async def exchange(
        self, conduit: RunningConduit, platform: FakePlatform, to: str, text: str
    ) -> str:
        """Post `text` (with a fresh message id) and return the reply."""
        await platform.post_user_message(to, text, new_event_id())
        return await self.reply(conduit, platform, to)

    # -- the contract ----------------------------------------------------------------

    async def test_conduit_class_follows_the_contract(self) -> None:
        cls = self.conduit_class
        assert issubclass(cls, Conduit)
        assert _NAME.fullmatch(cls.name), f"name {cls.name!r}: letters, digits, _ and -"
        assert issubclass(cls.config_model, ConduitConfig)

    async def test_an_unknown_config_key_is_refused_naming_it(self, platform: FakePlatform) -> None:
        section = {**self.conduit_config(platform), "no_such_key": "x"}
        with pytest.raises(ConduitConfigError, match="no_such_key"):
            self.conduit_class.load_config(section)

    # -- messages in -----------------------------------------------------------------

    async def test_a_message_reaches_a_thread_keyed_by_the_conduit_name(
        self, conduit: RunningConduit, platform: FakePlatform, ore_conduit_core: ConduitCore
    ) -> None:
        assert ECHO_PREFIX + "hello" in await self.exchange(conduit, platform, "conv-a", "hello")
        thread = await ore_conduit_core.thread_holding("hello")
        keys = list(thread.meta().all())
        assert any(key.startswith(f"{self.conduit_class.name}.") for key in keys), keys

    async def test_messages_of_one_conversation_share_a_thread(
        self, conduit: RunningConduit, platform: FakePlatform, ore_conduit_core: ConduitCore
    ) -> None:
        await self.exchange(conduit, platform, "conv-a", "first")
        await self.exchange(conduit, platform, "conv-a", "second")
        first = await ore_conduit_core.thread_holding("first")
        assert first.id == (await ore_conduit_core.thread_holding("second")).id

    async def test_a_message_delivered_twice_yields_one_turn(
        self, conduit: RunningConduit, platform: FakePlatform, ore_conduit_core: ConduitCore
    ) -> None:
        await platform.post_user_message("conv-a", "twice", "dup-1")
        await platform.post_user_message("conv-a", "twice", "dup-1")
        await platform.post_user_message("conv-a", "after", "after-1")
        first, second = [await self.reply(conduit, platform, "conv-a") for _ in range(2)]
        assert ECHO_PREFIX + "twice" in first
        assert ECHO_PREFIX + "after" in second  # not a second answer to "twice"
        thread = await ore_conduit_core.thread_holding("twice")
        assert _user_texts(thread) == ["twice", "after"]

    # -- output out ------------------------------------------------------------------

    async def test_replies_reach_their_own_conversation(
        self, conduit: RunningConduit, platform: FakePlatform
    ) -> None:
        await platform.post_user_message("conv-a", "alpha", new_event_id())
        await platform.post_user_message("conv-b", "beta", new_event_id())
        reply_b = await self.reply(conduit, platform, "conv-b")
        reply_a = await self.reply(conduit, platform, "conv-a")
        assert ECHO_PREFIX + "alpha" in reply_a
        assert "beta" not in reply_a
        assert ECHO_PREFIX + "beta" in reply_b
        assert "alpha" not in reply_b

    async def test_output_of_other_conduits_messages_is_not_rendered(
        self, conduit: RunningConduit, platform: FakePlatform, ore_conduit_core: ConduitCore
    ) -> None:
        if not self.renders_only_own_output:
            pytest.skip("this conduit shows every conduit's output")
        await self.exchange(conduit, platform, "conv-a", "mine")
        thread = await ore_conduit_core.thread_holding("mine")
        # Another namespace can neither write into this thread (it is unknown there) nor
        # make the conduit render its own conversations (they are on its subjects only).
        await ore_conduit_core.converse(thread.id, "from elsewhere", provenance="other-conduit")
        await ore_conduit_core.converse("kit-elsewhere", "elsewhere", provenance="other-conduit")
        reply = await self.exchange(conduit, platform, "conv-a", "mine again")
        assert ECHO_PREFIX + "mine again" in reply
        assert "elsewhere" not in reply
        assert _user_texts(await ore_conduit_core.store.get(thread.id)) == ["mine", "mine again"]

    async def test_output_made_while_the_conduit_was_down_arrives_after_a_restart(
        self, conduit: RunningConduit, platform: FakePlatform, ore_conduit_core: ConduitCore
    ) -> None:
        if not self.delivers_missed_output:
            pytest.skip("this conduit does not keep its place in the output")
        await self.exchange(conduit, platform, "conv-a", "before")
        thread = await ore_conduit_core.thread_holding("before")
        await conduit.stop()
        name = self.conduit_class.name
        await ore_conduit_core.converse(thread.id, "while down", provenance=name)
        await conduit.start()
        await self._until_ready(conduit, platform)
        assert ECHO_PREFIX + "while down" in await self.reply(conduit, platform, "conv-a")

    async def test_an_interrupt_cancels_the_running_turn(
        self, conduit: RunningConduit, platform: FakePlatform, ore_conduit_core: ConduitCore
    ) -> None:
        if not self.supports_interrupt:
            pytest.skip("the platform has no way to interrupt")
        gate = ore_conduit_core.processor.gate()
        await platform.post_user_message("conv-a", "take your time", new_event_id())
        await asyncio.wait_for(gate.started.wait(), TIMEOUT)
        thread = await ore_conduit_core.thread_holding("take your time")
        client = ore_conduit_core.client_for(self.conduit_class.name)
        async with client.events(thread.id, kinds={"lifecycle"}) as feed:
            await platform.interrupt("conv-a")
            await _until(feed, lambda event: event.phase == "cancelled")
        assert gate.cancelled == 1

    # -- shutdown --------------------------------------------------------------------

    async def test_cancel_stops_the_conduit_promptly(
        self, conduit: RunningConduit, platform: FakePlatform
    ) -> None:
        await self.exchange(conduit, platform, "conv-a", "busy")
        # stop() fails the test unless run() returns within TIMEOUT of the cancel; how
        # long it took is not asserted: on a loaded machine that measures the machine.
        await conduit.stop()

    async def test_cancel_leaves_no_tasks_behind(
        self, conduit: RunningConduit, platform: FakePlatform
    ) -> None:
        await self.exchange(conduit, platform, "conv-a", "busy")
        assert (await conduit.stop()).leftovers == []
