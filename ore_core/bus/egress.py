"""Egress: every output event of every stream onto NATS, as protocol.md describes.

A `Manager` sink. Deltas go straight to `P.out.T` on core NATS (best effort, never
stored); every other event is appended to `P.ev.T` in `ORE_EVENTS`, which the server
republishes to `P.out.T` with its sequence and the thread's previous sequence. Each
event is serialised exactly once; stored appends are pipelined (see `Pipeline`), so
the sink never waits for the server between two events of a busy thread.

Ownership (issue 10b): a worker whose partition lease is overdue (`may_write` false:
it was paused or cut off) publishes nothing for the partition's threads, and once a
thread left this worker (`forget`) whatever its old stream still emits is dropped
until the thread is attached here again (`prime`). `prime` also publishes a saved
answer that never reached `P.ev.T` (its owner died between the save and the append).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import structlog
from nats.aio.client import Client as NatsClient
from nats.errors import ConnectionClosedError, OutboundBufferLimitError
from nats.errors import Error as NatsError
from nats.js.errors import NotFoundError

from ore_core import jsonutil
from ore_core.artifacts import Delta
from ore_core.bus.codec import output_headers
from ore_core.bus.pipeline import Pipeline
from ore_core.events import (
    ArtifactEvent,
    ErrorEvent,
    LifecycleEvent,
    OutputEvent,
    TurnCompleteEvent,
    encode_event,
)
from ore_core.ledger.thread import Thread
from ore_core.session.manager import Manager
from ore_core.subjects import Subjects
from ore_core.turn import Role

__all__ = ["STORAGE_FULL", "Egress"]

STORAGE_FULL = "storage_full"
"""`code` of the error event a user gets while a JetStream limit holds their answer."""

log = structlog.get_logger("ore.bus")

_SUBJECT_CACHE = 65536  # threads whose subjects are remembered; cleared when exceeded


class Egress:
    """Publishes output events: deltas live on `P.out.T`, the rest stored on `P.ev.T`."""

    name = "ore-bus-egress"

    def __init__(
        self,
        nc: NatsClient,
        subjects: Subjects,
        pipeline: Pipeline,
        *,
        may_write: Callable[[str], bool] = lambda thread_id: True,
    ) -> None:
        self._nc = nc
        self._may_write = may_write
        self._gone: set[str] = set()  # threads that left this worker, until attached again
        self._primed: set[str] = set()
        self.refused = 0  # events not published: overdue lease or a thread that left
        self._subjects = subjects
        self._pipeline = pipeline
        self._events_prefix = subjects.events_wildcard[:-1]
        self._cache: dict[str, tuple[str, str]] = {}
        self._told: set[str] = set()  # threads told that their answer waits for space
        self._waiter: tuple[int, asyncio.Future[None]] | None = None
        self.emitted = 0
        """Events taken from the manager so far (compare `Manager.sink_queued`)."""
        self.dropped_deltas = 0
        pipeline.watch_limits(reached=self._limit_reached, cleared=self._told.clear)

    def attach(self, manager: Manager) -> Callable[[], Awaitable[None]]:
        """Receive every event of `manager`'s streams; returns the async unregister.

        Lossless: however far NATS falls behind (an outage), no stored event is dropped.
        """
        return manager.register_sink((), self.emit, name=self.name, lossless=True)

    def _subjects_of(self, thread_id: str) -> tuple[str, str]:
        pair = self._cache.get(thread_id)
        if pair is None:
            if len(self._cache) >= _SUBJECT_CACHE:
                self._cache.clear()
            pair = (self._subjects.events(thread_id), self._subjects.output(thread_id))
            self._cache[thread_id] = pair
        return pair

    async def emit(self, thread_id: str, event: OutputEvent) -> None:
        """Publish one event of `thread_id` (the sink function)."""
        try:
            stored, live = self._subjects_of(thread_id)
            data = encode_event(event)
            headers = output_headers(event)
            if (self._gone and thread_id in self._gone) or not self._may_write(thread_id):
                self.refused += 1
            elif isinstance(event, ArtifactEvent) and isinstance(event.artifact, Delta):
                await self._publish_live(live, data, headers)
            else:
                await self._pipeline.publish(stored, data, headers)
        finally:
            self.emitted += 1
            waiter = self._waiter
            if waiter is not None and self.emitted >= waiter[0] and not waiter[1].done():
                waiter[1].set_result(None)

    def forget(self, thread_id: str) -> None:
        """The thread left this worker: drop what its old stream still emits."""
        self._gone.add(thread_id)
        self._primed.discard(thread_id)

    async def prime(self, thread_id: str, thread: Thread | None = None) -> None:
        """The thread is (again) attached here: publish for it; once per attach, if its
        latest answer is saved but not in `P.ev.T`, publish that answer and a `done`."""
        self._gone.discard(thread_id)
        if thread is None or thread_id in self._primed:
            return
        if len(self._primed) >= _SUBJECT_CACHE:
            self._primed.clear()
        self._primed.add(thread_id)
        tip = thread.get_turn(thread.current_tip)
        if tip is None or tip.role == Role.USER:
            return
        try:
            last = await self._nc.jetstream().get_last_msg(
                self._subjects.events_stream, self._subjects_of(thread_id)[0], direct=True
            )
        except NotFoundError:
            return  # nothing stored (or expired): nothing to compare
        except (NatsError, TimeoutError) as exc:
            log.debug("last event not read", thread_id=thread_id, error=repr(exc))
            return
        if _answer_missing(last.data, tip.id):
            log.warning("stored answer missing from the events; publishing it", thread_id=thread_id)
            await self.emit(thread_id, TurnCompleteEvent(turn=tip))
            await self.emit(thread_id, LifecycleEvent(phase="done"))

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

    async def reply(self, thread_id: str, event: OutputEvent) -> None:
        """Send `event` to the thread's live subject only (answers to rejected input)."""
        await self._publish_live(
            self._subjects_of(thread_id)[1], encode_event(event), output_headers(event)
        )

    async def _limit_reached(self, subject: str, reason: str) -> None:
        """A stored event of a thread is held by a JetStream limit: tell its users once."""
        if not subject.startswith(self._events_prefix):
            return  # a dead-letter record: the operator's log line is enough
        thread_id = self._subjects.thread_id_of(subject)
        if thread_id in self._told:
            return
        self._told.add(thread_id)
        message = (
            f"ore cannot store its answer right now: a JetStream limit of the NATS server "
            f"is reached ({reason}). Nothing is lost: the answer follows once the operator "
            "frees space"
        )
        await self.reply(thread_id, ErrorEvent(message=message, code=STORAGE_FULL))

    async def _publish_live(self, subject: str, data: bytes, headers: dict[str, str]) -> None:
        try:
            await self._nc.publish(subject, data, headers=headers)
        except (OutboundBufferLimitError, ConnectionClosedError):
            self.dropped_deltas += 1  # best effort: the stored events carry the full text


def _answer_missing(data: Any, answer_id: str) -> bool:
    """Whether the last stored event of a thread shows a turn cut off before its answer."""
    try:
        event = jsonutil.loads(data or b"{}")
    except ValueError:
        return False
    kind = event.get("kind")
    if kind == "lifecycle" and event.get("phase") in ("done", "cancelled"):
        return False  # the turn's tail is stored (its `done` comes after its answer)
    if kind == "turn_complete" and (event.get("turn") or {}).get("id") == answer_id:
        return False
    return kind in ("turn_complete", "lifecycle", "text")
