"""Egress: every output event of every stream onto NATS, as protocol.md describes.

A `Manager` sink. Deltas go straight to `P.out.NS.T` on core NATS (best effort, never
stored); every other event is appended to `P.ev.NS.T` in `ORE_EVENTS`, which the server
republishes to `P.out.NS.T` with its sequence and the thread's previous sequence. `NS`
is the namespace the thread recorded when it was created (`namespace_of`): a sink
only hears a thread id, so ingress and the control API `bind` the namespaces of the
threads they resolve, and a thread nobody bound is looked up in its active stream. Each
event is serialised exactly once; stored appends are pipelined (see `Pipeline`), so
the sink never waits for the server between two events of a busy thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import structlog
from nats.aio.client import Client as NatsClient
from nats.errors import ConnectionClosedError, OutboundBufferLimitError

from ore_core.artifacts import Delta
from ore_core.bus.codec import output_headers
from ore_core.bus.pipeline import Pipeline
from ore_core.errors import SessionNotFound
from ore_core.events import ArtifactEvent, ErrorEvent, OutputEvent, encode_event
from ore_core.ledger.thread import Thread
from ore_core.session.manager import Manager
from ore_core.subjects import DEFAULT_NAMESPACE, NAMESPACE_KEY, Subjects

__all__ = ["STORAGE_FULL", "Egress", "namespace_of"]

STORAGE_FULL = "storage_full"
"""`code` of the error event a user gets while a JetStream limit holds their answer."""

log = structlog.get_logger("ore.bus")

_SUBJECT_CACHE = 65536  # threads whose subjects are remembered; cleared when exceeded


def namespace_of(thread: Thread) -> str:
    """The namespace a thread was created in (`DEFAULT_NAMESPACE` if it records none)."""
    return thread.meta().get(NAMESPACE_KEY) or DEFAULT_NAMESPACE


class Egress:
    """Publishes output events: deltas live on `P.out.NS.T`, the rest stored on `P.ev.NS.T`."""

    name = "ore-bus-egress"

    def __init__(
        self, nc: NatsClient, subjects: Subjects, pipeline: Pipeline, manager: Manager | None = None
    ) -> None:
        self._nc = nc
        self._subjects = subjects
        self._pipeline = pipeline
        self._manager = manager
        self._events_prefix = f"{subjects.prefix}.ev."
        self._cache: dict[str, tuple[str, str]] = {}
        self._told: set[str] = set()  # threads told that their answer waits for space
        self._waiter: tuple[int, asyncio.Future[None]] | None = None
        self.emitted = 0
        """Events taken from the manager so far (compare `Manager.sink_queued`)."""
        self.dropped_deltas = 0
        pipeline.watch_limits(reached=self._limit_reached, cleared=self._told.clear)

    def bind(self, thread_id: str, namespace: str) -> None:
        """Publish the events of `thread_id` under `namespace` (ingress and API call it)."""
        pair = self._cache.get(thread_id)
        if pair is None or not pair[0].endswith(f".{namespace}.{thread_id}"):
            self._remember(thread_id, namespace)

    def _remember(self, thread_id: str, namespace: str) -> tuple[str, str]:
        if len(self._cache) >= _SUBJECT_CACHE:
            self._cache.clear()
        pair = (
            self._subjects.events(namespace, thread_id),
            self._subjects.output(namespace, thread_id),
        )
        self._cache[thread_id] = pair
        return pair

    def forget(self, thread_id: str) -> None:
        """The thread was deleted: its id may come back in another namespace."""
        self._cache.pop(thread_id, None)

    def attach(self, manager: Manager) -> Callable[[], Awaitable[None]]:
        """Receive every event of `manager`'s streams; returns the async unregister.

        Lossless: however far NATS falls behind (an outage), no stored event is dropped.
        """
        return manager.register_sink((), self.emit, name=self.name, lossless=True)

    def _subjects_of(self, thread_id: str) -> tuple[str, str]:
        pair = self._cache.get(thread_id)
        if pair is None:
            namespace = DEFAULT_NAMESPACE
            if self._manager is not None:
                try:
                    namespace = namespace_of(self._manager.get(thread_id).state())
                except SessionNotFound:
                    log.warning("output of an unbound thread", thread_id=thread_id)
            pair = self._remember(thread_id, namespace)
        return pair

    async def emit(self, thread_id: str, event: OutputEvent) -> None:
        """Publish one event of `thread_id` (the sink function)."""
        try:
            stored, live = self._subjects_of(thread_id)
            data = encode_event(event)
            headers = output_headers(event)
            if isinstance(event, ArtifactEvent) and isinstance(event.artifact, Delta):
                await self._publish_live(live, data, headers)
            else:
                await self._pipeline.publish(stored, data, headers)
        finally:
            self.emitted += 1
            waiter = self._waiter
            if waiter is not None and self.emitted >= waiter[0] and not waiter[1].done():
                waiter[1].set_result(None)

    async def wait_emitted(self, position: int) -> None:
        """Wait until `emitted >= position` (one waiter at a time: the ingress ack loop)."""
        if self.emitted >= position:
            return
        future = asyncio.get_running_loop().create_future()
        self._waiter = (position, future)
        try:
            await future
        finally:
            self._waiter = None

    async def reply(self, namespace: str, thread_id: str, event: OutputEvent) -> None:
        """Send `event` to `P.out.NS.T` only (answers to rejected input of that namespace)."""
        await self._publish_live(
            self._subjects.output(namespace, thread_id), encode_event(event), output_headers(event)
        )

    async def _limit_reached(self, subject: str, reason: str) -> None:
        """A stored event of a thread is held by a JetStream limit: tell its users once."""
        if not subject.startswith(self._events_prefix):
            return  # a dead-letter record: the operator's log line is enough
        namespace, thread_id = self._subjects.thread_of(subject)
        if thread_id in self._told:
            return
        self._told.add(thread_id)
        message = (
            f"ore cannot store its answer right now: a JetStream limit of the NATS server "
            f"is reached ({reason}). Nothing is lost: the answer follows once the operator "
            "frees space"
        )
        await self.reply(
            namespace or DEFAULT_NAMESPACE,
            thread_id,
            ErrorEvent(message=message, code=STORAGE_FULL),
        )

    async def _publish_live(self, subject: str, data: bytes, headers: dict[str, str]) -> None:
        try:
            await self._nc.publish(subject, data, headers=headers)
        except (OutboundBufferLimitError, ConnectionClosedError):
            self.dropped_deltas += 1  # best effort: the stored events carry the full text
