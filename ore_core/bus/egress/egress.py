"""Egress: every output event of every stream onto NATS, one stored message per turn.

A batch sink of the `Manager` (it gets every event queued since it last ran, in
order). Live-only events (deltas, notices, `lifecycle` submitted/streaming) go straight
to `P.out.NS.T` on core NATS: never stored, best effort, and several queued together for
one thread leave as one `batch` message. Every other event of a turn (turn_complete,
complete artifacts, properties, error, `lifecycle` cancelled/done) is held until the
turn's `lifecycle: done` and then appended to `P.ev.NS.T` in `ORE_EVENTS` as ONE message
(`Ore-Kind: batch`), which the server republishes to `P.out.NS.T` with its sequence and
the thread's previous sequence. A durable event published outside any turn (a
`properties` event from the control API on an idle thread) is stored at the end of
the sink's run, as a batch of its own. A turn given up before its `done` (its save
failed: the message is handled again) has its held events dropped.

Why: a JetStream append costs the core, the server and every conduit far more than
building the event (protocol.md "Batches"; docs/performance.md). Each event is
serialised exactly once (`encode_event`); a batch only joins those bytes. Appends are
pipelined (see `Pipeline`), so the sink never waits for the server.

`emitted` counts the events taken from the manager (a turn's held events count when
taken, and its `done` is taken only with its batch handed to the pipeline), so the
ingress acknowledges a message once `emitted` passed its position and the pipeline
stored everything published up to then (`AckBatcher.run`, bus/ingress/acks.py).

Ownership (issue 10b): a worker whose partition lease is overdue (`may_write` false:
it was paused or cut off) publishes nothing for the partition's threads (a turn's held
events are dropped with it, never stored in part), and once a thread left this worker
(`release`) whatever its old stream still emits is dropped until the thread is attached
here again (`prime`). `prime` also finds a saved answer that never reached `P.ev.T`
(its owner died between the save and the append): it looks inside the thread's last
stored batch for that answer (see `_answer_missing`) and has the thread's stream
announce that message's turns again when the message comes back (it was never
acknowledged), with its context: its one batch is the batch the dead owner would have
stored (`Stream.announce_again`).

A thread whose output was dropped for an overdue lease is treated as if it had left,
even if the lease is renewed a moment later (a blip: a VM stall, a long GC), and the
ingress is told (`watch_overdue`): its messages whose output was dropped are not
acknowledged but handled again from the reloaded thread, whose `prime` stores the
answer that was saved but dropped, as after a crash between the save and the append.

The server fences every append too: it carries `Nats-Expected-Last-Subject-Sequence`,
the sequence of the last message this worker knows on the thread's `P.ev.T` (read by
`prime`, or before the thread's first append here; then each stored batch's ack, see
`Pipeline.publish_fenced`). A worker paused between its lease check and the publish
while another took the thread over is refused by the server, and that is handled
exactly like an overdue lease (`_lost`): nothing of a stale worker is stored.

`NS` is the namespace the thread recorded when it was created (`namespace_of`): a sink
only hears a thread id, so ingress and the control API `bind` the namespaces of the
threads they resolve, and a thread nobody bound is looked up in its active stream.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import structlog
from nats.aio.client import Client as NatsClient
from nats.errors import ConnectionClosedError, OutboundBufferLimitError
from nats.errors import Error as NatsError
from nats.js.api import RawStreamMsg
from nats.js.errors import NotFoundError

from ore_core import jsonutil, tracing
from ore_core._nats.codec import (
    batch_block,
    namespace_of,
    output_block,
)
from ore_core._nats.wire import publish_now, wait_flushed
from ore_core.artifacts import Delta
from ore_core.bridge.cache import LinkCache
from ore_core.bus.egress.copies import StoredCopies
from ore_core.bus.egress.pipeline import Pipeline
from ore_core.bus.egress.space_notices import STORAGE_FULL, SpaceNotices
from ore_core.errors import BusError, SessionNotFound
from ore_core.events import (
    BATCH_KIND,
    ArtifactEvent,
    EventContext,
    LifecycleEvent,
    NoticeEvent,
    OutputEvent,
    TurnCompleteEvent,
    encode_batch,
    encode_event,
)
from ore_core.ledger.thread import Thread
from ore_core.session.bridging import is_relay
from ore_core.session.manager import Manager
from ore_core.session.turn_context import recorded_events
from ore_core.subjects import (
    DEFAULT_NAMESPACE,
    HEADER_LAST_TURN,
    Subjects,
)
from ore_core.turn import Role, Turn

__all__ = ["STORAGE_FULL", "Egress", "EventsNotRead", "is_live_only"]

log = structlog.get_logger("ore.bus")


class EventsNotRead(BusError):
    """A thread's last stored event could not be read when it was attached (NATS is
    unavailable): its message is handled again later."""


_SUBJECT_CACHE = 65536  # threads whose subjects are remembered; cleared when exceeded
_LIVE_PHASES = frozenset({"submitted", "streaming"})


def is_live_only(event: OutputEvent) -> bool:
    """True for events sent on core NATS only: deltas, notices, lifecycle submitted/streaming."""
    # Lifecycle first: the commonest kind of a turn's events.
    if isinstance(event, LifecycleEvent):
        return event.phase in _LIVE_PHASES
    if isinstance(event, ArtifactEvent):
        return isinstance(event.artifact, Delta)
    return isinstance(event, NoticeEvent)


_BATCH_OVERHEAD = len(encode_batch([]))


def _parts(encoded: list[bytes], limit: int) -> list[list[bytes]]:
    """`encoded` cut into runs whose batch fits `limit` bytes (almost always one run).

    An event too large on its own is a run of its own: the pipeline refuses and logs
    it, and the rest of the turn (its `done` above all) is still stored.
    """
    if sum(map(len, encoded)) + len(encoded) <= limit:
        return [encoded]
    parts: list[list[bytes]] = []
    size = limit + 1
    for data in encoded:
        if size + len(data) + 1 > limit:
            parts.append([])
            size = 0
        parts[-1].append(data)
        size += len(data) + 1
    return parts


class _Run:
    """Encoded events of one thread waiting to leave as one message (`turn`: the id of
    the last turn among them, if any)."""

    __slots__ = ("data", "first", "turn")

    def __init__(self, data: bytes, first: OutputEvent, turn: str | None = None) -> None:
        self.data = [data]
        self.first = first
        self.turn = turn


_Subjects = tuple[str, str, str]
"""A thread's `P.ev.NS.T` and `P.out.NS.T`, and its `NS`."""


class Egress:
    """Publishes output events: live-only ones on `P.out.NS.T`, each turn's others as one
    stored batch on `P.ev.NS.T`."""

    name = "ore-bus-egress"

    def __init__(
        self,
        nc: NatsClient,
        subjects: Subjects,
        pipeline: Pipeline,
        manager: Manager | None = None,
        *,
        may_write: Callable[[str], bool] = lambda thread_id: True,
        links: LinkCache | None = None,
    ) -> None:
        self._nc = nc
        self._links = links
        self._may_write = may_write
        self._gone: set[str] = set()  # threads that left this worker, until attached again
        # Threads primed since attached here, with the ownership term they were primed in.
        self._primed: dict[str, int] = {}
        # The last turn stored on each thread's events as far as this worker knows (read
        # by `prime`, then its own appends): named by its batches without turns.
        self._last_turns: dict[str, str] = {}
        # Messages whose saved turns are missing from the events, per thread: event id ->
        # the message's last turn, until a batch holding that turn is appended.
        self._announcing: dict[str, dict[str, str]] = {}
        self.refused = 0  # events not published: overdue lease or a thread that left
        self.batches = 0  # stored batches appended (read by the metrics)
        self._subjects = subjects
        self._pipeline = pipeline
        self._manager = manager
        self._cache: dict[str, _Subjects] = {}
        self._turns: dict[str, _Run] = {}  # durable events of turns not ended yet
        self._waiter: tuple[int, asyncio.Future[None]] | None = None
        self._on_overdue: Callable[[str, int], None] | None = None
        self.emitted = 0
        """Events taken from the manager so far (compare `Manager.sink_queued`)."""
        self.dropped_deltas = 0
        self.abandoned = 0
        """Held events dropped because their turn was given up (its save failed)."""
        notices = SpaceNotices(subjects, self.reply)
        pipeline.watch_limits(reached=notices.reached, cleared=notices.cleared)
        pipeline.watch_fenced(self._fenced)
        self._copies = None if links is None else StoredCopies(nc, subjects, links)
        if self._copies is not None:
            pipeline.watch_stored(self._copies.stored)

    @property
    def lost_copies(self) -> int:
        """Copies for linked namespaces not sent (disconnected): their feeds catch up."""
        return 0 if self._copies is None else self._copies.lost

    def watch_overdue(self, callback: Callable[[str, int], None]) -> None:
        """Call `callback(thread_id, position)` when output of `thread_id` is dropped
        because the lease of its partition is overdue or the server refused an append
        (another worker appended: `_fenced`), not because it left (`release`).

        `position` counts the manager's events taken before the first dropped one: a
        message handled at a sink position above it (`Manager.sink_queued`) lost output
        and must not be acknowledged. The thread publishes nothing more until `prime`.
        """
        self._on_overdue = callback

    def bind(self, thread_id: str, namespace: str) -> None:
        """Publish the events of `thread_id` under `namespace` (ingress and API call it)."""
        pair = self._cache.get(thread_id)
        if pair is None or pair[2] != namespace:
            self._remember(thread_id, namespace)

    def _remember(self, thread_id: str, namespace: str) -> _Subjects:
        if len(self._cache) >= _SUBJECT_CACHE:
            self._cache.clear()
        pair = (
            self._subjects.events(namespace, thread_id),
            self._subjects.output(namespace, thread_id),
            namespace,
        )
        self._cache[thread_id] = pair
        return pair

    def thread_deleted(self, thread_id: str) -> None:
        """The thread was deleted: its id may come back in another namespace."""
        self._forget_sequence(thread_id)
        self._cache.pop(thread_id, None)

    def _forget_sequence(self, thread_id: str) -> None:
        """Read the last sequence of the thread's events again before its next append."""
        pair = self._cache.get(thread_id)
        if pair is not None:
            self._pipeline.forget(pair[0])

    def attach(self, manager: Manager) -> Callable[[], Awaitable[None]]:
        """Receive every event of `manager`'s streams; returns the async unregister.

        Lossless: however far NATS falls behind (an outage), no stored event is dropped.
        """
        self._manager = manager
        return manager.register_batch_sink((), self.emit_batch, name=self.name, lossless=True)

    def _subjects_of(self, thread_id: str) -> _Subjects:
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
        """Publish one event of `thread_id` (a batch of one; see `emit_batch`)."""
        await self.emit_batch([(thread_id, event)])

    async def emit_batch(self, items: list[tuple[str, OutputEvent | None]]) -> None:
        """Publish events in order: live runs at once, a turn's durable events at its end.

        Per thread, live events queued before a turn's `done` leave before its stored
        batch, so a reader sees them first (deltas never arrive after `done`). A turn
        given up (`(thread_id, None)`: its save failed, the message is handled again)
        has its held events dropped: nothing the store lacks is stored as an event.
        """
        try:
            await self._emit_batch(items)
        finally:
            self.emitted += len(items)
            waiter = self._waiter
            if waiter is not None and self.emitted >= waiter[0] and not waiter[1].done():
                waiter[1].set_result(None)

    def release(self, thread_id: str) -> None:
        """The thread left this worker: drop what its old stream held or still emits."""
        self._gone.add(thread_id)
        self._primed.pop(thread_id, None)
        self._last_turns.pop(thread_id, None)
        self._forget_sequence(thread_id)
        self._announcing.pop(thread_id, None)
        held = self._turns.pop(thread_id, None)
        if held is not None:
            self.refused += len(held.data)

    async def prime(self, thread_id: str, thread: Thread | None = None, term: int = 0) -> None:
        """The thread is (again) attached here: publish for it; once per attach, read the
        last sequence of its `P.ev.T` (every append is fenced from there on: a worker
        that took the thread over meanwhile makes the server refuse this one's), and if
        its latest answer (a relay's: its latest user turn) is saved but not in `P.ev.T`,
        have the thread's stream announce that message again when it comes back (a
        stream attached again in the same term, after a stale copy was dropped, is told
        again until the message's batch left).

        `term` names the stretch of ownership of the thread's partition (the ingress
        counts one per lease won): a thread primed in an earlier term is primed again,
        since another worker may have appended while the partition was away.

        Without a stream (an egress used alone) the restored events are appended at once
        as batches of their own, with the thread's namespace as their provenance: they
        are not the manager's events, so they do not count in `emitted` (the ingress ack
        loop compares `emitted` with the manager's queue).
        """
        self._gone.discard(thread_id)
        if thread is None:
            return
        if self._primed.get(thread_id) == term:
            announcing = self._announcing.get(thread_id)
            stream = None if self._manager is None else self._manager.stream_of(thread_id)
            if announcing and stream is not None:
                stream.announce_again(announcing)
            return
        if thread_id not in self._cache:
            self._remember(thread_id, namespace_of(thread))
        if len(self._primed) >= _SUBJECT_CACHE:
            self._primed.clear()
        self._primed[thread_id] = term
        subject = self._subjects_of(thread_id)[0]
        # A batch of this thread still on its way (retried while the thread was away:
        # a NATS node died, the lease was lost and taken again) is read first: judged
        # without it, its answer would look missing and be stored twice.
        await self._pipeline.wait_subject(subject)
        try:
            last = await self._last_stored(subject)
        except (NatsError, TimeoutError) as exc:
            # Unread, a saved answer missing from the events could not be told: the
            # message waits and is handled again (the ingress parks it), never guessed.
            self._primed.pop(thread_id, None)
            self._pipeline.forget(subject)
            self._last_turns.pop(thread_id, None)
            raise EventsNotRead(
                f"thread {thread_id}: its last stored event was not read ({exc!r})"
            ) from exc
        sequence = 0 if last is None else last.seq
        if sequence is None:
            self._pipeline.forget(subject)
        else:
            self._pipeline.know(subject, sequence)
        if self._copies is not None:
            self._copies.last(thread_id, last)
        stored = self._note_last_stored(thread_id, last)
        tip = thread.get_turn(thread.current_tip)
        # A relay's user turn is all its message stores: saved, it may still be missing.
        if tip is None or (tip.role == Role.USER and not is_relay(thread)):
            return
        messages = _messages_missing(stored, thread, tip)
        if not messages:
            return
        log.warning("stored answer missing from the events; publishing it", thread_id=thread_id)
        stream = None if self._manager is None else self._manager.stream_of(thread_id)
        if stream is not None and all(turns[0].event_id for turns in messages):
            # With its message, which comes again (it was never acknowledged).
            announcing = {turns[0].event_id: turns[-1].id for turns in messages}
            self._announcing[thread_id] = announcing
            stream.announce_again(announcing)
            return
        context = EventContext(provenance=namespace_of(thread))  # no stream: at once
        if stored is None and len(messages) > 1:
            return  # nothing stored (expired?) and no message to tell by: never twice
        for turns in messages:
            events = [*recorded_events(turns, context), LifecycleEvent.of("done", context)]
            run = _Run(encode_event(events[0]), events[0], turns[-1].id)
            run.data += [encode_event(event) for event in events[1:]]
            await self._append(thread_id, run, self.emitted)
            if thread_id in self._gone:  # refused (the lease is overdue): tried again later
                return

    def primed(self, thread_id: str, term: int = 0) -> bool:
        """Whether `prime(thread_id, ..., term)` would do nothing now (primed since
        attached, in this term of ownership).

        A primed thread is never `gone` (`release` unprimes it), so the ingress may then
        skip the call, and its await, for a thread's next message.
        """
        return self._primed.get(thread_id) == term

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

    def _refuses(self, thread_id: str, position: int) -> bool:
        """Whether nothing may be published for `thread_id` here (lease overdue or gone).

        An overdue lease makes the thread gone (`_overdue`): `position` is the sink
        position of the first event dropped.
        """
        if self._gone and thread_id in self._gone:
            return True
        if self._may_write(thread_id):
            return False
        self._overdue(thread_id, position)
        return True

    def _overdue(self, thread_id: str, position: int) -> None:
        """Output of `thread_id` was dropped for an overdue lease (see `_lost`)."""
        self._lost(thread_id, position, "output dropped: the partition lease is overdue")

    def _fenced(self, subject: str, position: int) -> None:
        """The server refused an append of this worker to `subject` (`Pipeline.watch_fenced`):
        another worker appended to the thread's events, it owns the thread now."""
        thread_id = self._subjects.thread_of(subject)[1]
        self._lost(
            thread_id,
            position,
            "output refused by the server: another worker appended to the thread's events "
            "(it owns the thread now); its messages are handled again once attached here",
        )

    def _lost(self, thread_id: str, position: int, why: str) -> None:
        """Output of `thread_id` was dropped (`position`: the sink position of the first
        event dropped): drop the rest of it until the thread is attached again, and tell
        the ingress (`watch_overdue`).

        Why gone and not only dropped: the lease may be renewed a moment later, and the
        rest of a turn whose first events were dropped must not be stored as a batch
        without them; the thread's next attach (`prime`) restores the dropped answer.
        """
        self.release(thread_id)
        log.warning(why, thread_id=thread_id)
        if self._on_overdue is not None:
            self._on_overdue(thread_id, position)

    async def _emit_batch(self, items: list[tuple[str, OutputEvent | None]]) -> None:
        live: dict[str, _Run] = {}
        turns = self._turns
        allowed: set[str] = set()  # asked once per thread between awaits
        start = self.emitted
        # `position`: the sink position of `event` (the manager's events taken before it).
        for position, (thread_id, event) in enumerate(items, start):
            if event is None:  # the turn was given up: what it held is never stored
                held = turns.pop(thread_id, None)
                if held is not None:
                    self.abandoned += len(held.data)
                continue
            if thread_id not in allowed:
                if self._refuses(thread_id, position):
                    self.refused += 1
                    held = turns.pop(thread_id, None)
                    if held is not None:
                        self.refused += len(held.data)
                    continue
                allowed.add(thread_id)
            data = encode_event(event)
            if is_live_only(event):
                run = live.get(thread_id)
                if run is None:
                    live[thread_id] = _Run(data, event)
                else:
                    run.data.append(data)
                continue
            turn = turns.get(thread_id)
            if turn is None:
                turns[thread_id] = turn = _Run(data, event)
            else:
                turn.data.append(data)
            if type(event) is TurnCompleteEvent:
                turn.turn = event.turn.id
            elif isinstance(event, LifecycleEvent) and event.phase == "done":
                run = live.pop(thread_id, None)
                waited = run is not None and self._publish_live(thread_id, run)
                if waited:
                    await wait_flushed(self._nc)
                del turns[thread_id]
                # Asked above, with no await since unless it waited for the flush.
                await self._append(thread_id, turn, position, asked=not waited)
                allowed.clear()  # ownership may have changed while we waited
        over_limit = False
        for thread_id, run in live.items():
            over_limit |= self._publish_live(thread_id, run)
        if over_limit:
            await wait_flushed(self._nc)
        if turns:
            await self._store_outside_turns(start + len(items))

    async def _store_outside_turns(self, position: int) -> None:
        """Store held events of threads not in a turn (published outside one, or closed)."""
        manager = self._manager
        for thread_id in list(self._turns):
            stream = manager.stream_of(thread_id) if manager is not None else None
            if stream is None or not stream.in_turn:
                await self._append(thread_id, self._turns.pop(thread_id), position)

    async def flush(self) -> None:
        """Store every held event now (shutdown: nothing waits for a `done` any more)."""
        while self._turns:
            thread_id, turn = self._turns.popitem()
            await self._append(thread_id, turn, self.emitted)

    @staticmethod
    def _header_block(run: _Run) -> bytes:
        """The encoded headers of a live message (one event's kind, or a batch)."""
        first = run.first
        kind = first.kind if len(run.data) == 1 else BATCH_KIND
        return output_block(kind, first.context.traceparent)

    async def _append(
        self, thread_id: str, turn: _Run, position: int, *, asked: bool = False
    ) -> None:
        """Store a turn's held events: one batch, or several if one would be too large.

        `position`: the sink position of its last event (see `_refuses`); `asked`: the
        caller had `_refuses` say no for the thread with no await since (nothing but the
        clock moved: the same decision)."""
        if not asked and self._refuses(thread_id, position):
            self.refused += len(turn.data)
            return
        subject = self._subjects_of(thread_id)[0]
        if not self._pipeline.knows(subject) and not await self._read_sequence(
            thread_id, subject, position
        ):
            self.refused += len(turn.data)
            return
        traceparent = turn.first.context.traceparent
        parts = _parts(turn.data, self._nc.max_payload - _BATCH_OVERHEAD)
        if turn.turn is not None:
            announcing = self._announcing.get(thread_id) if self._announcing else None
            if announcing:
                for event_id in [e for e, last in announcing.items() if last == turn.turn]:
                    del announcing[event_id]
                if not announcing:
                    del self._announcing[thread_id]
            self._learn_last_turn(thread_id, turn.turn)
        # A batch without turns names the last one stored before it (a turn split into
        # several batches names its own in each: only those without turns need it).
        last_turn = None
        if turn.turn is None or len(parts) > 1:
            last_turn = self._last_turns.get(thread_id)
        for part in parts:
            await self._append_batch(subject, encode_batch(part), traceparent, position, last_turn)

    def _learn_last_turn(self, thread_id: str, turn_id: str) -> None:
        if len(self._last_turns) >= _SUBJECT_CACHE and thread_id not in self._last_turns:
            self._last_turns.clear()  # then a batch without turns goes without the name
        self._last_turns[thread_id] = turn_id

    async def _last_stored(self, subject: str) -> RawStreamMsg | None:
        """The last message stored on `subject` (a direct get); None when there is none."""
        try:
            return await self._nc.jetstream().get_last_msg(
                self._subjects.events_stream, subject, direct=True
            )
        except NotFoundError:
            return None

    async def _read_sequence(self, thread_id: str, subject: str, position: int) -> bool:
        """Read the last sequence of `subject` before a fenced append (never guessed).

        False when nothing may be appended now: the read failed (handled like a refused
        append: the thread's messages are handled again) or the thread left meanwhile.
        """
        try:
            last = await self._last_stored(subject)
            sequence = 0 if last is None else last.seq
            if sequence is None:
                raise NatsError("a direct get without Nats-Sequence")
        except (NatsError, TimeoutError) as exc:
            if thread_id not in self._gone:
                self._lost(
                    thread_id,
                    position,
                    f"output not stored: the last event of the thread was not read ({exc!r})",
                )
            return False
        if self._refuses(thread_id, position):
            return False
        self._pipeline.know(subject, sequence)
        self._note_last_stored(thread_id, last)
        return True

    def _note_last_stored(self, thread_id: str, msg: RawStreamMsg | None) -> _LastStored | None:
        """Read the thread's last stored message once, and learn its last stored turn
        from it (forgotten when it names none)."""
        last = _LastStored.of(msg)
        if last is None or not last.turn_ids:
            self._last_turns.pop(thread_id, None)
        else:
            self._learn_last_turn(thread_id, last.turn_ids[-1])
        return last

    async def _append_batch(
        self, subject: str, data: bytes, traceparent: str, position: int, last_turn: str | None
    ) -> None:
        """The one place that appends to `P.ev.T` (always a batch, even of one event),
        fenced by the thread's last sequence (`position`: see `_lost`), naming
        `last_turn` when it is a safe header value."""
        if tracing.tracer is not None and traceparent:
            traceparent = tracing.egress(traceparent, subject)
        self.batches += 1
        block = batch_block(traceparent, last_turn)
        await self._pipeline.publish_fenced(
            self._subjects.events_stream, subject, data, block, position
        )

    def _publish_live(self, thread_id: str, run: _Run) -> bool:
        """Publish a live run now (and its copies); True when the caller should `wait_flushed`."""
        over = self._publish_run(self._subjects_of(thread_id)[1], run)
        if self._links is not None:
            for namespace in self._links.copies(thread_id):
                over |= self._publish_run(self._subjects.output(namespace, thread_id), run)
        return over

    def _publish_run(self, subject: str, run: _Run) -> bool:
        """Send a run on core NATS, best effort (`publish_now`'s answer)."""
        data = run.data[0] if len(run.data) == 1 else encode_batch(run.data)
        try:
            return publish_now(self._nc, subject, data, header=self._header_block(run))
        except (OutboundBufferLimitError, ConnectionClosedError):
            self.dropped_deltas += 1  # best effort: the stored events carry the full text
            return False

    async def reply(self, namespace: str, thread_id: str, *events: OutputEvent) -> None:
        """Send `events` to `P.out.NS.T` only (answers to rejected input of that namespace)."""
        encoded = [encode_event(event) for event in events]
        run = _Run(encoded[0], events[0])
        run.data = encoded
        if self._publish_run(self._subjects.output(namespace, thread_id), run):
            await wait_flushed(self._nc)


def _stored_events(data: Any) -> tuple[list[dict[str, Any]], bool]:
    """The events of one stored message, and whether it was a batch (issue 11)."""
    try:
        value = jsonutil.loads(data or b"{}")
    except ValueError:
        return [], False
    if not isinstance(value, dict):
        return [], False
    if value.get("kind") != BATCH_KIND:
        return [value], False  # one event per message (stored before batches)
    events = value.get("events")
    if not isinstance(events, list):
        return [], True
    return [e for e in events if isinstance(e, dict)], True


@dataclass(frozen=True, slots=True)
class _LastStored:
    """A thread's last stored message, parsed once: its events, whether it was a batch,
    and the ids of the turns it holds (a batch without turns: the one its
    `Ore-Last-Turn` names, the last stored before it)."""

    events: list[dict[str, Any]]
    batch: bool
    turn_ids: list[str]

    @classmethod
    def of(cls, msg: RawStreamMsg | None) -> _LastStored | None:
        if msg is None:
            return None
        events, batch = _stored_events(msg.data)
        turn_ids = [
            turn_id
            for event in events
            if event.get("kind") == "turn_complete"
            and isinstance(turn_id := (event.get("turn") or {}).get("id"), str)
        ]
        named = (msg.headers or {}).get(HEADER_LAST_TURN)
        if not turn_ids and named and batch:
            turn_ids = [named]
        return cls(events, batch, turn_ids)


def _messages_missing(last: _LastStored | None, thread: Thread, tip: Turn) -> list[list[Turn]]:
    """The saved messages whose turns are missing from the events, oldest first: each
    its user turn and its answer (usually none, or the latest message).

    `_answer_missing` decides for the latest answer; when it is missing and the last
    stored batch holds turns of the thread's active path, every message after those is
    missing too: output dropped while a lease was overdue can span several turns of a
    thread saved meanwhile (each is stored with its own `done`). A stored turn not on
    the path (a compacted or rewound thread) leaves just the latest message. With
    nothing stored every message on the path may be missing (a stream announces only
    those that come again: a message is acknowledged once its batch is stored).
    """
    if last is not None and not _answer_missing(last, tip.id):
        return []
    stored = set(last.turn_ids) if last is not None and last.batch else set()
    messages: list[list[Turn]] = []
    turn: Turn | None = tip
    while turn is not None and turn.id not in stored:
        if not messages or messages[-1][-1].role == Role.USER:
            messages.append([])
        messages[-1].append(turn)
        if last is not None and not stored and turn.role == Role.USER:
            break  # nothing stored names a turn: the latest message alone
        parent = turn.parent_id
        turn = thread.get_turn(parent) if parent and parent != turn.id else None
    if turn is None and stored:
        messages = messages[:1]  # the stored turns are not on the path: the latest alone
    while turn is not None and messages[-1][-1].role != Role.USER:
        messages[-1].append(turn)  # an answer whose user turn was stored (a split batch)
        parent = turn.parent_id
        turn = thread.get_turn(parent) if parent and parent != turn.id else None
    return [turns[::-1] for turns in messages[::-1] if turns[-1].role == Role.USER]


def _answer_missing(last: _LastStored, answer_id: str) -> bool:
    """Whether the thread's last stored message shows its latest answer was never stored.

    `last` is the last message on the thread's `P.ev.T`. With
    batches a turn's events are stored together at its end, so an owner that died
    between saving the answer and appending the batch leaves the PREVIOUS turn's batch
    last (or nothing, on a thread's first turn): a batch that holds turns but not this
    answer means the answer came after it. A batch without any turn (the `done` of a
    redelivered message answered before, a `properties` event) names the last turn
    stored before it (its `Ore-Last-Turn` header, in `turn_ids`), which counts as if it held
    that turn; one without the header (stored by an older core) tells nothing, and
    nothing is restored: never an answer twice.
    """
    if answer_id in last.turn_ids:
        return False
    if last.batch:
        return bool(last.turn_ids)
    events = last.events
    if not events:
        return False
    kind = events[-1].get("kind")  # one event per message: the cut-off turn's last one
    if kind == "lifecycle" and events[-1].get("phase") in ("done", "cancelled"):
        return False  # the turn's tail is stored (its `done` comes after its answer)
    return kind in ("turn_complete", "lifecycle", "text")
