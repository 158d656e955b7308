"""Manager: the registry of active streams, their store, processor, interceptors and sinks.

One Manager per process (or per test). It creates and attaches streams (one active
stream per thread, even when many tasks attach at once), forwards every output event
to the registered sinks, and forgets streams when they close.

Sinks run in their own tasks behind bounded buffers: a slow or failing sink never
stalls a stream or another sink; failures are logged with the sink's name. A batch
sink also hears, in order with the events, that a turn was abandoned (its save
failed: the message is handled again later), so a sink that holds a turn's events
until its `done` (the bus egress) drops them. Those
tasks, the streams' workers and the idle sweeper belong to one `TaskScope` (`tasks`):
a crash of any of them (a bug, not a failing sink call) is logged and stops the
Manager's work, and `aclose()` raises it (or, under `ore serve`, the core's scope
reports it).

Live text deltas are paced with `delta_interval` > 0: at most one message per
interval per thread, each up to `delta_max_bytes` (see `ore_core.session.deltas`).
`delta_intervals` sets another interval for the threads of a namespace (a web page
wants text sooner than a chat API with rate limits): looked up once when a stream is
loaded, so pacing costs nothing more per delta.

Memory is bounded by active threads: with `idle_timeout`, a stream with nothing
queued or running and no subscriber for that long is closed (its thread is in the
store already) and loaded again by the next `attach`.
"""

from __future__ import annotations

import asyncio
import builtins
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial

import structlog

from ore_core.errors import SessionNotFound
from ore_core.events import OutputEvent
from ore_core.ids import NAMESPACE_KEY
from ore_core.ledger.thread import Thread
from ore_core.session.fanout import EventBuffer, SubscriberOverflow
from ore_core.session.policy import DoubleTexting
from ore_core.session.protocols import Interceptor, Sink, SinkFunc, Store, TurnProcessor
from ore_core.session.store_health import StoreHealth
from ore_core.session.stream import Stream
from ore_core.session.turn_context import Transform
from ore_core.tasks import AsyncClosing, TaskScope

__all__ = ["DefaultMetadata", "Manager"]

log = structlog.get_logger("ore.session")

DefaultMetadata = Mapping[str, str] | Callable[[], Mapping[str, str]]
"""Metadata every new thread starts with (a mapping, or a function returning one)."""

_SinkItem = tuple[str, OutputEvent | None]
"""`(thread_id, event)`; `(thread_id, None)` marks an abandoned turn (`on_abandoned`)."""


def _event_of(item: _SinkItem) -> OutputEvent | None:
    return item[1]


def _rebuild(item: _SinkItem, event: OutputEvent) -> _SinkItem:
    return (item[0], event)


BatchSinkFunc = Callable[[list[tuple[str, OutputEvent | None]]], Awaitable[None]]
"""A sink that takes every `(thread_id, event)` queued for it at once, in order.

`(thread_id, None)` says that the thread's turn whose events came before it was given
up (its save failed; the message is handled again later, from its start)."""


@dataclass(eq=False)
class _SinkRunner:
    """Delivers events to one sink function from its own task, in order.

    A batch sink (`batch_fn`) gets everything queued at each wake-up in one call, so
    a burst of events (a turn) costs it one task switch, not one per event.
    """

    name: str
    kinds: frozenset[str]
    buffer: EventBuffer[_SinkItem]
    fn: SinkFunc | None = None
    batch_fn: BatchSinkFunc | None = None
    task: asyncio.Task[None] | None = field(default=None, init=False)

    def start(self, tasks: TaskScope) -> None:
        if self.task is None:
            self.task = tasks.spawn(self._run(), name=f"ore-sink-{self.name}")

    async def _run(self) -> None:
        """Hand the buffered events to the sink: one at a time to `fn`, everything
        waiting at once to `batch_fn`, until the buffer ends or overflows."""
        buffer, fn, batch_fn = self.buffer, self.fn, self.batch_fn
        while True:
            try:
                first = await buffer.get()
            except StopAsyncIteration:
                return
            except SubscriberOverflow as exc:
                log.error(
                    "sink disconnected: it fell too far behind", sink=self.name, error=str(exc)
                )
                return
            if batch_fn is not None:
                items = [first, *buffer.take_all()]
                try:
                    await batch_fn(items)
                except Exception as exc:
                    log.error("sink failed", sink=self.name, events=len(items), error=str(exc))
                continue
            assert fn is not None
            thread_id, event = first
            assert event is not None  # abandoned-turn marks go to batch sinks only
            try:
                await fn(thread_id, event)
            except Exception as exc:
                log.error(
                    "sink failed",
                    sink=self.name,
                    thread_id=thread_id,
                    kind=event.kind,
                    error=str(exc),
                )

    async def stop(self) -> None:
        self.buffer.close()
        if self.task is not None:
            await asyncio.wait([self.task])


_Push = Callable[[_SinkItem], None]


def _push_all(pushes: tuple[_Push, ...], item: _SinkItem) -> None:
    for push in pushes:
        push(item)


class _Routes(dict[str, _Push]):
    """kind -> one push that queues an item for every sink taking the kind (the sink's
    own `push` when one sink takes it, the common case), routed on its first event.

    A dict with `__missing__`, so an event costs one subscript and one call: no `get`,
    no check, no loop.
    """

    __slots__ = ("_sinks", "_tasks")

    def __init__(self, sinks: list[_SinkRunner], tasks: TaskScope) -> None:
        super().__init__()
        self._sinks = sinks
        self._tasks = tasks

    def __missing__(self, kind: str) -> _Push:
        """The push to the sinks that take `kind` (their tasks started), remembered."""
        runners = [r for r in self._sinks if not r.kinds or kind in r.kinds]
        for runner in runners:
            if runner.task is None:
                runner.start(self._tasks)
        pushes = tuple(runner.buffer.push for runner in runners)
        route = self[kind] = pushes[0] if len(pushes) == 1 else partial(_push_all, pushes)
        return route


class Manager(AsyncClosing):
    """Creates, attaches and closes streams over one store and one turn processor.

    Use as `async with Manager(...) as manager:` or call `aclose()`; the store is
    owned by the caller and stays open.
    """

    def __init__(
        self,
        store: Store,
        processor: TurnProcessor,
        *,
        interceptors: Iterable[Interceptor] = (),
        sinks: Iterable[Sink] = (),
        transforms: Sequence[Transform] = (),
        default_metadata: DefaultMetadata | None = None,
        policy: DoubleTexting | str = DoubleTexting.QUEUE,
        subscriber_buffer: int = 1024,
        idle_timeout: float | None = None,
        delta_interval: float = 0.0,
        delta_max_bytes: int = 4096,
        delta_intervals: Mapping[str, float] | None = None,
    ) -> None:
        self.store = store
        self.store_health = StoreHealth()
        self.idle_timeout = idle_timeout
        self._delta_pacing = (delta_interval, delta_max_bytes)
        self._namespace_pacing = {
            namespace: (interval, delta_max_bytes)
            for namespace, interval in (delta_intervals or {}).items()
        }
        self._sweeper: asyncio.Task[None] | None = None
        self.processor = processor
        ordered = sorted(enumerate(interceptors), key=lambda p: (getattr(p[1], "order", 0), p[0]))
        self.interceptors: tuple[Interceptor, ...] = tuple(i for _, i in ordered)
        self.transforms = tuple(transforms)
        self.policy = DoubleTexting(policy)
        self._default_metadata = default_metadata
        self._subscriber_buffer = subscriber_buffer
        self._streams: dict[str, Stream] = {}
        self._attaching: dict[str, asyncio.Future[Stream]] = {}
        self._sinks: list[_SinkRunner] = []
        self.tasks = TaskScope("manager")
        """The sink tasks, stream workers and idle sweeper (a core service adopts it)."""
        # kind -> the push of every sink taking it; rebuilt when sinks change, so an
        # event costs one lookup and one push per sink that wants it, no filter loop.
        self._routes = _Routes(self._sinks, self.tasks)
        self._closed = False
        for sink in sinks:
            self.register_sink(sink.kinds, sink.emit, name=getattr(sink, "name", None))

    # -- streams --------------------------------------------------------------

    def _default(self) -> dict[str, str]:
        value = self._default_metadata
        if value is None:
            return {}
        return dict(value() if callable(value) else value)

    def _activate(self, thread: Thread) -> Stream:
        stream = Stream(
            thread,
            store=self.store,
            processor=self.processor,
            interceptors=self.interceptors,
            transforms=self.transforms,
            policy=self.policy,
            subscriber_buffer=self._subscriber_buffer,
            on_publish=self._to_sinks,
            on_closed=self._forget,
            on_abandoned=self._abandoned,
            new_thread=lambda: self._new_thread(thread),
            store_health=self.store_health,
            delta_pacing=self._pacing_of(thread),
            tasks=self.tasks,
        )
        self._streams[thread.id] = stream
        if self.idle_timeout is not None and self._sweeper is None and not self._closed:
            self._sweeper = self.tasks.spawn(
                self._sweep(self.idle_timeout), name="ore-idle-streams"
            )
        return stream

    def _pacing_of(self, thread: Thread) -> tuple[float, int]:
        """The delta pacing of `thread`'s namespace (the default when it has none)."""
        if not self._namespace_pacing:
            return self._delta_pacing
        namespace = thread.meta().get(NAMESPACE_KEY)
        return self._namespace_pacing.get(namespace or "", self._delta_pacing)

    async def _new_thread(self, origin: Thread) -> str:
        """`/new` from `origin`: the new thread stays in origin's namespace (bus v2)."""
        namespace = origin.meta().get(NAMESPACE_KEY)
        return (await self.create_thread({NAMESPACE_KEY: namespace} if namespace else None)).id

    async def _sweep(self, idle: float) -> None:
        """Close streams idle for `idle` seconds, checking a few times per period."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(max(idle / 4, 0.01))
            now = loop.time()
            for stream in list(self._streams.values()):
                if stream.idle and not stream.subscribed and now - stream.last_active >= idle:
                    await stream.close()

    async def create(self, metadata: Mapping[str, str] | None = None) -> Stream:
        """A new thread (default metadata + `metadata`) and its active stream."""
        return self._activate(await self.create_thread(metadata))

    async def create_with_id(
        self, thread_id: str, metadata: Mapping[str, str] | None = None
    ) -> Stream:
        """A new thread with a chosen id; raises ThreadExists instead of overwriting one."""
        return self._activate(await self.create_thread(metadata, thread_id))

    async def create_thread(
        self, metadata: Mapping[str, str] | None = None, thread_id: str | None = None
    ) -> Thread:
        """A new stored thread (default metadata + `metadata`) without a stream: for a
        caller that only names it (the control API, `/new`), so that only the process
        that handles its messages keeps it in memory. ThreadExists for a taken id."""
        return await self.store.create(thread_id, {**self._default(), **(metadata or {})})

    async def attach(self, thread_id: str) -> Stream:
        """The active stream of a stored thread, loading it once even under concurrent calls.

        Raises ThreadNotFound (or ThreadCorrupt, InvalidThreadId) from the store.
        """
        stream = self._streams.get(thread_id)
        if stream is not None:
            return stream
        pending = self._attaching.get(thread_id)
        if pending is not None:
            return await asyncio.shield(pending)
        future: asyncio.Future[Stream] = asyncio.get_running_loop().create_future()
        self._attaching[thread_id] = future
        try:
            thread = await self.store.get(thread_id)
            stream = self._streams.get(thread_id) or self._activate(thread)
            future.set_result(stream)
            return stream
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # other waiters re-raise it; nobody else may be waiting
            raise
        finally:
            del self._attaching[thread_id]

    async def lookup_or_create(
        self, key: str, value: str, metadata: Mapping[str, str] | None = None
    ) -> tuple[Stream, bool]:
        """The stream of the thread whose metadata `key` is `value`, creating it atomically."""
        thread, created = await self.lookup_thread(key, value, metadata)
        active = self._streams.get(thread.id)
        if active is not None:
            return active, created
        if created:
            return self._activate(thread), True
        return await self.attach(thread.id), False

    async def lookup_thread(
        self, key: str, value: str, metadata: Mapping[str, str] | None = None
    ) -> tuple[Thread, bool]:
        """The stored thread whose metadata `key` is `value`, created atomically (default
        metadata + `metadata` + the pair) if there is none, without a stream (see
        `create_thread`); and whether it was created."""
        return await self.store.get_or_create_by(
            key, value, {**self._default(), **(metadata or {}), key: value}
        )

    def get(self, thread_id: str) -> Stream:
        """The active stream of `thread_id`; SessionNotFound when it is not attached."""
        stream = self._streams.get(thread_id)
        if stream is None:
            raise SessionNotFound(f"session {thread_id} not found (attach it first)")
        return stream

    def list(self) -> list[Stream]:
        """The active streams."""
        return list(self._streams.values())

    async def close(self, thread_id: str) -> None:
        """Close the active stream of `thread_id` (the thread stays in the store)."""
        stream = self.get(thread_id)
        await stream.close()

    def _forget(self, stream: Stream) -> None:
        if self._streams.get(stream.id) is stream:
            del self._streams[stream.id]

    # -- threads in the store ---------------------------------------------------

    async def get_thread(self, thread_id: str) -> Thread:
        """The live thread if attached, else the stored one."""
        stream = self._streams.get(thread_id)
        return stream.state() if stream is not None else await self.store.get(thread_id)

    async def get_by(self, key: str, value: str) -> Thread:
        """The stored thread whose metadata `key` is `value`."""
        return await self.store.get_by(key, value)

    async def list_threads(self) -> builtins.list[Thread]:
        """Every readable stored thread."""
        return await self.store.list()

    async def delete_thread(self, thread_id: str) -> bool:
        """Close the thread's stream if active, then delete it from the store."""
        stream = self._streams.get(thread_id)
        if stream is not None:
            await stream.close()
        return await self.store.delete(thread_id)

    # -- sinks ----------------------------------------------------------------

    def register_sink(
        self,
        kinds: Iterable[str],
        fn: SinkFunc,
        *,
        name: str | None = None,
        lossless: bool = False,
    ) -> Callable[[], Awaitable[None]]:
        """Deliver events of `kinds` (empty = all) from every stream to `fn(thread_id, event)`.

        A sink that falls behind gets deltas merged (or dropped) and, far behind, is
        disconnected; a `lossless` sink (the bus egress) is never disconnected and
        never loses a non-delta event. Returns an async `unregister()` (idempotent)
        that stops delivery after the events already queued for this sink.
        """
        runner = _SinkRunner(
            name or str(getattr(fn, "__qualname__", "sink")),
            frozenset(kinds),
            self._sink_buffer(lossless),
            fn=fn,
        )
        return self._add_runner(runner)

    def register_batch_sink(
        self,
        kinds: Iterable[str],
        fn: BatchSinkFunc,
        *,
        name: str,
        lossless: bool = False,
    ) -> Callable[[], Awaitable[None]]:
        """Like `register_sink`, but `fn(items)` gets every queued `(thread_id, event)`
        at once, in order (events of several threads interleaved, each thread's in order).

        An item `(thread_id, None)` marks a turn given up after the events before it
        (its save failed; the message is handled again later): a sink that holds a
        turn's events until its `done` drops them (see `BatchSinkFunc`).
        """
        runner = _SinkRunner(name, frozenset(kinds), self._sink_buffer(lossless), batch_fn=fn)
        return self._add_runner(runner)

    def _sink_buffer(self, lossless: bool) -> EventBuffer[_SinkItem]:
        return EventBuffer(_event_of, _rebuild, maxsize=self._subscriber_buffer, lossless=lossless)

    def _add_runner(self, runner: _SinkRunner) -> Callable[[], Awaitable[None]]:
        self._sinks.append(runner)
        self._routes.clear()
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass  # no running loop yet: started on first delivery
        else:
            runner.start(self.tasks)

        async def unregister() -> None:
            if runner in self._sinks:
                self._sinks.remove(runner)
                self._routes.clear()
            await runner.stop()

        return unregister

    def sink_queued(self, name: str) -> int:
        """How many items were ever queued for the sink named `name` (0: no such sink).

        A sink that counts what it has handled can tell from this that everything
        published before a given moment has reached it (the bus acks ingress that way).
        """
        for runner in self._sinks:
            if runner.name == name:
                return runner.buffer.appended
        return 0

    def stream_of(self, thread_id: str) -> Stream | None:
        """The active stream of `thread_id`, or None (no error: for sinks on the hot path)."""
        return self._streams.get(thread_id)

    def _abandoned(self, thread_id: str) -> None:
        """A turn of `thread_id` was given up: mark it, after its events, for batch sinks."""
        for runner in self._sinks:
            if runner.batch_fn is not None:
                if runner.task is None:
                    runner.start(self.tasks)
                runner.buffer.push_mark((thread_id, None))

    def _to_sinks(self, thread_id: str, event: OutputEvent) -> None:
        self._routes[event.kind]((thread_id, event))

    # -- lifetime -------------------------------------------------------------

    async def aclose(self) -> None:
        """Close every active stream and stop the sinks after they drain. Idempotent.

        Raises TaskCrashed if a sink task, stream worker or the sweeper crashed (and no owner's
        scope adopted `tasks` to report it).
        """
        if self._closed:
            return
        self._closed = True
        if self._sweeper is not None:
            self._sweeper.cancel()
            await asyncio.wait([self._sweeper])
        for stream in list(self._streams.values()):
            await stream.close()
        for runner in list(self._sinks):
            await runner.stop()
        self._sinks.clear()
        self._routes.clear()
        await self.tasks.aclose()
