"""Ingress: messages from `ORE_IN` into the streams of a `Manager`, acked once handled.

One `Puller` per partition streams its durable consumer's messages and handles them in
order, so the messages of one thread (always in one partition) reach its stream in
the order they were stored. A valid message is submitted to the thread's stream and
acknowledged when the stream reports it completely handled and saved; a turn cut
short by shutdown stays unacknowledged and is redelivered (the stream recognises a
message it has seen by its event id). While a message waits or runs, a ticker tells
the server it is in progress, so long turns are not redelivered meanwhile. While a
handled message is acknowledged only once its output events are stored; while a
JetStream limit holds them back (`Pipeline.full`) it waits, kept in progress, and
comes back if the worker dies.

The subject `P.inp.<p>.NS.T` names the sender's namespace NS, which NATS permissions
let only that conduit (and the core and admins) publish on: it is the sender's
identity. The payload cannot claim another one (`context.provenance` must be empty or
NS; the core fills it in), and a thread of another namespace is answered exactly like
an unknown thread, so a conduit can neither write into nor learn about other threads.

Bad input (protocol.md "Rejected input") is acknowledged at once, answered with an
`error` then `lifecycle: done` on `P.out.NS.T` when the subject is usable, logged, and
recorded on `P.dlq.REASON`. Nothing a client sends stops a partition. A stored thread
that cannot be decoded is treated the same way (reason `corrupt_thread`), at once.

Failures are retried, never acknowledged away. When the store refuses a stale copy
(`StaleThread`) or cannot save (disk full, read-only, locked), the stream hands the
message back and the thread is *parked*: its handed-back messages, and every newer
one that arrives meanwhile, wait here unacknowledged (kept alive with progress acks)
and are handled again in stream order, at once for a stale copy (the thread is
reloaded), after a backoff for an unavailable store (`retry_delay` doubling up to
`retry_delay_max`; the sender is told once that the answer is delayed). Why not NAK
with a delay: the server applies the consumer's BackOff on top of a NAK's delay from
the second redelivery on (measured: delay + backoff[n] - ack_wait, minutes with the
defaults), and redeliveries of one thread's messages come back in any order. If the
worker stops or dies, parked messages are redelivered by the server as usual.

Partitions are pulled only while this worker owns them (ownership.py calls `acquire`,
`release` and `abandon`); a message of a partition it does not own (a pull that
outlived the lease) is handed back at once, unless the lease is only overdue (a pause:
it may be renewed in a moment): then it is parked until the lease is renewed or lost
(a NAK would come back at once, again and again, until `max_deliver` drops it). When
the egress drops a thread's output for an overdue lease, or the server refuses it
because another worker appended (`output_refused`), the
thread's messages whose output was dropped are parked instead of acknowledged and its
stream is dropped: handled again, they find their answers saved, and attaching the
thread stores those answers (`Egress.prime`). `abandon` and `drop_thread` close streams
without saving and hand their messages back: another worker owns those threads now.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import random
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

import structlog
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.errors import Error as NatsError

from ore_core import jsonutil
from ore_core.bridge.cache import LinkCache
from ore_core.bus.codec import (
    BAD_NAMESPACE,
    BAD_SCHEMA,
    BAD_THREAD_ID,
    IDENTITY,
    INGRESS_SCHEMAS,
    SCHEMA,
    TOO_LARGE,
    UNKNOWN_THREAD,
    classify,
    stream_sequence,
    with_traceparent,
)
from ore_core.bus.egress import Egress, EventsNotRead, namespace_of
from ore_core.bus.pipeline import Pipeline
from ore_core.bus.puller import Puller
from ore_core.bus.streams import BusConfig, consumer_name, reset_consumer
from ore_core.conduit.wire import settle_now, wait_flushed, wake_flusher
from ore_core.errors import (
    OreError,
    SessionClosed,
    SessionNotFound,
    StaleThread,
    ThreadCorrupt,
    ThreadExists,
    ThreadNotFound,
)
from ore_core.events import (
    ErrorEvent,
    EventContext,
    EventDecodeError,
    IngressEvent,
    InterruptEvent,
    LifecycleEvent,
    NoticeEvent,
    Severity,
    UserMessageEvent,
    decode_ingress,
)
from ore_core.ids import is_valid_thread_id
from ore_core.session.manager import Manager
from ore_core.session.store_health import DELAYED_NOTICE, is_store_failure
from ore_core.session.stream import Stream
from ore_core.subjects import (
    HEADER_SCHEMA,
    NAMESPACE_KEY,
    Subjects,
    is_valid_namespace,
    partition_of,
)
from ore_core.tasks import TaskScope

__all__ = ["DLQ_DATA_LIMIT", "Ingress"]

log = structlog.get_logger("ore.bus")

DLQ_DATA_LIMIT = 64 * 1024
"""Bytes of a rejected payload kept in its dead-letter record (the rest is cut)."""

_NO_CONTEXT = EventContext()
_STOP_STORE_WAIT = 5.0  # seconds stop() waits for handled messages' output to be stored

# An ack waits this long for another write to ride along with (the next turn's output,
# other acks) before it is written alone: back to back turns of one conversation then
# cost the core one socket write per turn instead of two, and under load the server
# gets acks in larger writes. A worker that dies meanwhile only causes a redelivery,
# which the thread's record answers with a `done` alone, as after any crash.
ACK_LINGER = 0.01
_RACE_BACKOFF = 0.1  # seconds: the first ceiling of the random delay after repeated races
CORRUPT_THREAD = "corrupt_thread"
"""Dead-letter reason of a message whose stored thread cannot be decoded."""


@dataclass(slots=True, eq=False)
class _Parked:
    """A thread's messages waiting to be handled again, by stream sequence."""

    messages: dict[int, Msg] = field(default_factory=dict)
    timer: asyncio.TimerHandle | None = None
    resuming: bool = False


_RESET_TIMEOUT = 2.0  # seconds per JetStream request of a consumer reset (then retried)
_CLOSED_CHECK = 0.5  # seconds between looks for deliveries whose stream was closed
_OWNED_CHECK = 0.1  # seconds between looks whether an overdue lease is usable again
_NAMESPACES_LIMIT = 1024  # valid namespaces remembered (cleared when exceeded)


class _Rejected(Exception):
    """Internal: this message is bad input with a dead-letter `reason`."""

    def __init__(self, reason: str, detail: str, context: EventContext = _NO_CONTEXT) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail
        self.context = context


@dataclass(slots=True, eq=False)
class _Delivery:
    """A message submitted to a stream and not yet acknowledged."""

    msg: Msg
    thread_id: str
    stream: Stream
    interrupt: bool

    @property
    def sequence(self) -> int:
        """The message's stream sequence, read when it is parked (not for every message)."""
        return stream_sequence(self.msg)


class Ingress:
    """Pulls `ORE_IN` partitions into `manager` (create with the service; see `start`)."""

    def __init__(
        self,
        nc: NatsClient,
        manager: Manager,
        subjects: Subjects,
        config: BusConfig,
        *,
        egress: Egress,
        pipeline: Pipeline,
        owns: Callable[[int], bool] = lambda partition: True,
        holds: Callable[[int], bool] | None = None,
        batch: int = 256,
        handover_grace: float = 30.0,
        links: LinkCache | None = None,
    ) -> None:
        self._nc = nc
        self._links = links
        self._manager = manager
        self._subjects = subjects
        self._config = config
        self._egress = egress
        self._pipeline = pipeline
        self._batch = batch
        self._max_payload = config.max_payload
        self._raw_inbound = subjects.prefix + ".in."  # for raw subject tokens
        self._owns = owns
        self._holds = owns if holds is None else holds
        self._handover_grace = handover_grace
        self._partitions = config.partition_count
        self._inflight: dict[str, dict[str, _Delivery]] = {}
        # Handled messages with the egress sink position at that moment and their
        # thread: acked once everything published up to it is stored (see `_ack_loop`).
        self._acks: deque[tuple[Msg, int, str]] = deque()
        self._parked: dict[str, _Parked] = {}
        self._failures: dict[str, int] = {}  # store failures in a row per thread: backoff
        self._namespaces: set[str] = set()  # namespaces found valid (`_check_namespace`)
        self._ack_wakeup = asyncio.Event()
        self._ack_wake: asyncio.TimerHandle | None = None
        self._handled_one = asyncio.Event()  # set whenever a thread has nothing in flight
        self._pullers: dict[int, Puller] = {}
        # The term of each partition's ownership (one per lease won): a thread primed in
        # an earlier term is primed again (`Egress.prime`): the partition was away, and
        # another worker may have appended to its threads' events meanwhile.
        self._terms: dict[int, int] = {}
        self._term_count = itertools.count(1)
        self._recycling: set[int] = set()
        self.tasks = TaskScope("ingress")
        """The ack, progress and closed-stream loops and, as children, the pullers'
        watchdogs, partition recycles and the retries of parked threads (the core adopts
        it)."""
        self._retries = self.tasks.child("retry")
        self._recycles = self.tasks.child("recycle")
        self._idle: asyncio.Future[None] | None = None
        self._stopping = False

    # -- state ------------------------------------------------------------------

    @property
    def running(self) -> bool:
        """True while every owned partition is being pulled, the server answers and no
        loop crashed (a worker that owns no partition yet is running)."""
        return (
            not self._stopping
            and self.tasks.crash is None
            and all(p.healthy for p in self._pullers.values())
        )

    @property
    def pulled(self) -> list[int]:
        """The partitions being pulled now."""
        return sorted(self._pullers)

    @property
    def inflight(self) -> int:
        """Messages submitted to streams and not yet acknowledged."""
        return sum(len(entries) for entries in self._inflight.values())

    # -- lifetime ---------------------------------------------------------------

    async def start(self) -> None:
        """Start the acknowledgement, progress and closed-stream loops; partitions are
        pulled as they are acquired (`acquire`)."""
        self.tasks.spawn(self._ack_loop(), name="ore-ingress-ack")
        self.tasks.spawn(self._progress_loop(), name="ore-ingress-progress")
        self.tasks.spawn(self._closed_loop(), name="ore-ingress-closed")

    async def acquire(self, partition: int, *, fresh: bool = True, settle: float = 0.0) -> None:
        """Start pulling `partition`, just won: reset its consumer if its owner died.

        Streams of its threads that are open here were opened without owning them (the
        control API) and may be stale: they are dropped first, so the next message
        loads the thread from the store.
        """
        if self._stopping or partition in self._pullers:
            return
        if fresh:
            self._terms[partition] = next(self._term_count)
            await self._drop_streams(partition)
        start = await self._reset(partition, settle)
        if start is not None:
            log.info("partition taken over from a lost worker", partition=partition, start=start)
        puller = Puller(
            self._nc,
            self._subjects.inbound_stream,
            consumer_name(partition),
            functools.partial(self._deliver, partition),
            batch=self._batch,
            on_interrupted=functools.partial(self._interrupted, partition),
        )
        self._pullers[partition] = puller
        self.tasks.adopt(puller.tasks)
        await puller.start()

    async def _reset(self, partition: int, settle: float) -> int | None:
        """`reset_consumer`, retried while this worker holds the lease.

        After a NATS node crash the partition's consumer may have no leader for a while
        (an election on a busy cluster takes seconds): each try is short and the next
        follows at once, instead of giving the lease up and claiming it again later.
        """
        delay = 0.1
        resume: dict[int, int] = {}  # the start found before a delete, for the next try
        while True:
            try:
                return await reset_consumer(
                    self._nc.jetstream(),
                    self._subjects,
                    self._config,
                    partition,
                    settle=settle,
                    request_timeout=_RESET_TIMEOUT,
                    resume=resume,
                )
            except (NatsError, TimeoutError) as exc:
                if self._stopping or not self._owns(partition):
                    raise
                log.debug("partition consumer not reset yet", partition=partition, error=repr(exc))
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)

    async def release(self, partition: int) -> None:
        """Hand `partition` over: stop pulling, let its turns finish (bounded), close.

        The lease is still ours meanwhile, so finished turns are saved and acked;
        turns still running after `handover_grace` are cut and handed back.
        """
        puller = self._pullers.pop(partition, None)
        if puller is not None:
            await puller.stop()
        await self._wait_handled(partition)
        for stream in self._streams_of(partition):
            await stream.close()
        await self._hand_back(partition)

    async def _flush_acks(self) -> None:
        """Let the ack loop send what is handled (its output stored), then flush."""
        try:
            async with asyncio.timeout(_STOP_STORE_WAIT):
                while self._acks:  # noqa: ASYNC110 (the ack loop empties it)
                    await asyncio.sleep(0.05)
        except TimeoutError:
            pass
        try:
            await self._nc.flush(timeout=2)
        except (NatsError, TimeoutError) as exc:
            log.debug("acks not flushed", error=repr(exc))

    async def _wait_handled(self, partition: int) -> None:
        try:
            async with asyncio.timeout(self._handover_grace):
                while self._deliveries(partition):
                    await self._handled_one.wait()
                    self._handled_one.clear()
        except TimeoutError:
            log.warning("handover grace over; cutting turns", partition=partition)

    async def abandon(self, partition: int) -> None:
        """The lease on `partition` is lost: drop its streams unsaved, hand messages back.

        Handled messages whose output the egress has not taken yet are handed back too:
        it will drop that output (the threads left), so the next owner answers them
        (the stored answer, found by `Egress.prime`) instead of nobody.
        """
        puller = self._pullers.pop(partition, None)
        await self._drop_streams(partition)  # first: nothing of it may be written any more
        if puller is not None:
            await puller.stop()
        await self._hand_back(partition)
        count = self._partitions
        emitted = self._egress.emitted
        unstored = self._take_acks(
            lambda thread_id, position: (
                position > emitted and partition_of(thread_id, count) == partition
            )
        )
        for msg, _, thread_id in unstored:
            self._egress.release(thread_id)
            await self._settle(msg.nak)

    def _take_acks(self, which: Callable[[str, int], bool]) -> list[tuple[Msg, int, str]]:
        """Remove and return the handled messages `which(thread_id, position)` picks."""
        taken = [entry for entry in self._acks if which(entry[2], entry[1])]
        if taken:
            kept = [entry for entry in self._acks if not which(entry[2], entry[1])]
            self._acks.clear()
            self._acks.extend(kept)
        return taken

    def output_refused(self, thread_id: str, position: int) -> None:
        """The egress dropped output of `thread_id` for an overdue lease, or the server
        refused its append because another worker appended (`Egress.watch_overdue`).

        Its messages handled past `position` (their answer was saved but not stored as
        events) are not acknowledged, and neither are those in flight: they wait here,
        parked in order, while the thread's stream is dropped, and are then handled
        again from the thread as stored. Attaching it primes the egress, which stores
        the dropped answer (a redelivered answered message then gets only `done`), as
        after a crash between the save and the append. Nothing is acknowledged for
        output that was never stored.
        """
        parked = self._parked.get(thread_id)
        if parked is None:
            parked = self._parked[thread_id] = _Parked()
        parked.resuming = False  # a retry running now stops after its current message
        if parked.timer is not None:
            parked.timer.cancel()
            parked.timer = None
        for msg, _, _ in self._take_acks(lambda t, p: t == thread_id and p > position):
            parked.messages[stream_sequence(msg)] = msg
        for delivery in self._pop_thread(thread_id):
            parked.messages[delivery.sequence] = delivery.msg
        if self._stopping:
            return  # `stop` hands parked messages back (or the server does, after ack_wait)
        self._retries.spawn(
            self._reload(thread_id, parked), name=f"ore-ingress-reload-{thread_id}", critical=False
        )

    async def _reload(self, thread_id: str, parked: _Parked) -> None:
        """Drop the thread's stream unsaved, then handle its parked messages again."""
        stream = self._manager.stream_of(thread_id)
        if stream is not None:
            await stream.abandon()
        for delivery in self._pop_thread(thread_id):  # submitted while we dropped it
            parked.messages[delivery.sequence] = delivery.msg
        if self._parked.get(thread_id) is not parked or not parked.messages:
            if self._parked.get(thread_id) is parked:
                del self._parked[thread_id]
            return  # handed back meanwhile (the partition was lost), or nothing to redo
        sequence = min(parked.messages)
        error = StaleThread(f"thread {thread_id}: output dropped while the lease was overdue")
        self._park(parked.messages.pop(sequence), thread_id, sequence, error)

    async def drop_thread(self, thread_id: str) -> None:
        """Another worker wrote the thread (fencing): drop it unsaved, hand back its messages."""
        try:
            await self._manager.get(thread_id).abandon()
        except SessionNotFound:
            pass
        self._egress.release(thread_id)
        for delivery in self._pop_thread(thread_id):
            await self._settle(delivery.msg.nak)

    async def _drop_streams(self, partition: int) -> None:
        for stream in self._streams_of(partition):
            await stream.abandon()
            self._egress.release(stream.id)

    def _streams_of(self, partition: int) -> list[Stream]:
        count = self._partitions
        return [s for s in self._manager.list() if partition_of(s.id, count) == partition]

    def _deliveries(self, partition: int) -> list[str]:
        count = self._partitions
        return [t for t in self._inflight if partition_of(t, count) == partition]

    def _pop_thread(self, thread_id: str) -> list[_Delivery]:
        entries = self._inflight.pop(thread_id, None)
        self._forget_if_empty(thread_id)
        return list(entries.values()) if entries else []

    async def _hand_back(self, partition: int, *, forget: bool = True) -> None:
        count = self._partitions
        for thread_id in [t for t in self._parked if partition_of(t, count) == partition]:
            parked = self._parked.pop(thread_id)
            if parked.timer is not None:
                parked.timer.cancel()
            for msg in parked.messages.values():
                await self._settle(msg.nak)
        for thread_id in self._deliveries(partition):
            if forget:
                self._egress.release(thread_id)
            for delivery in self._pop_thread(thread_id):
                await self._settle(delivery.msg.nak)

    async def reconnected(self) -> None:
        """After a reconnect, deliveries may have been lost in the dead connection: every
        owned partition is recycled (see `recycle`)."""
        for partition in list(self._pullers):
            self._interrupted(partition)

    def _interrupted(self, partition: int) -> None:
        if partition in self._recycling or self._stopping:
            return
        self._recycling.add(partition)
        self._recycles.spawn(
            self.recycle(partition), name=f"ore-recycle-p{partition}", critical=False
        )

    async def recycle(self, partition: int) -> None:
        """Pull `partition` afresh after deliveries may have been lost (a reconnect, a
        consumer leader that died): finish what is in flight, then take the partition
        again from its ack floor. Otherwise a lost delivery would come back only after
        `ack_wait`, behind newer messages of its thread."""
        self._recycling.add(partition)
        try:
            puller = self._pullers.pop(partition, None)
            if puller is None:
                return
            await puller.stop()
            await self._wait_handled(partition)
            await self._hand_back(partition, forget=False)
            await self._flush_acks()  # so the consumer's ack floor is as high as it can be
            delay = 0.1
            while not self._stopping:
                if self._owns(partition):
                    try:  # the consumer may have no leader for a while (a cluster election)
                        # Its streams are still right; acks sent a moment ago settle first.
                        await self.acquire(partition, fresh=False, settle=1.0)
                        return
                    except (NatsError, TimeoutError) as exc:
                        log.debug(
                            "partition not pulled again yet", partition=partition, error=repr(exc)
                        )
                elif not self._holds(partition):
                    return  # lost or handed over: `abandon` or `release` took it
                # Overdue (NATS was away longer than the lease's validity): renewed, it is
                # pulled again here; lost, `abandon` hands it back. Never held unpulled.
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)
        except Exception:
            log.exception("recycling a partition failed", partition=partition)
        finally:
            self._recycling.discard(partition)

    async def stop_pulling(self) -> None:
        """Pull nothing more; returns once what was delivered has been handed on."""
        self._stopping = True
        pullers = list(self._pullers.values())
        self._pullers.clear()
        await asyncio.gather(*(puller.stop() for puller in pullers))

    async def wait_handled(self) -> None:
        """Return once every message submitted so far is handled (bound it with a timeout)."""
        if not self._inflight:
            return
        if self._idle is None or self._idle.done():
            self._idle = asyncio.get_running_loop().create_future()
        await asyncio.shield(self._idle)

    async def stop(self) -> None:
        """After the streams closed: send pending acks, hand the rest back for redelivery.

        Raises TaskCrashed if a loop crashed (unless the core's scope reports it).
        """
        await self.stop_pulling()
        unfinished = [d.msg for entries in self._inflight.values() for d in entries.values()]
        self._inflight.clear()
        for msg in unfinished:
            await self._settle(msg.nak)
        if unfinished:
            log.info("unfinished messages handed back for redelivery", count=len(unfinished))
        for parked in self._parked.values():
            if parked.timer is not None:
                parked.timer.cancel()
            parked.resuming = False
            for msg in parked.messages.values():
                await self._settle(msg.nak)  # the next worker (or this one, restarted)
        self._parked.clear()
        try:
            await self.tasks.aclose()
        finally:
            await self._settle_handled()
            self._wake_acks()  # what lingers goes now, before the connection closes

    async def _settle_handled(self) -> None:
        """At stop (the sinks have drained): ack what is stored, hand back the rest."""
        if not self._acks:
            return
        mark = self._pipeline.mark()
        try:
            async with asyncio.timeout(_STOP_STORE_WAIT):
                await self._pipeline.wait_stored(mark)
        except TimeoutError:
            pass
        stored = self._pipeline.stored_before(mark)
        handled = [msg for msg, _, _ in self._acks]
        self._acks.clear()
        for msg in handled:
            await self._settle(msg.ack if stored else msg.nak)
        if not stored:
            log.warning(
                "output not stored at stop; handled messages handed back", count=len(handled)
            )

    # -- one message ------------------------------------------------------------

    def _deliver(self, partition: int, msg: Msg) -> Awaitable[None] | None:
        """Handle `msg` at once when nothing needs awaiting, else return what handles it.

        The common case, a message of a thread whose stream is open (and primed) here,
        is handled right in the connection's read loop, with no task or coroutine: what
        `_receive` does, in the same order, minus its awaits that would not have waited.
        Anything else (a thread to load or create, a rejection, a partition no longer
        owned) is `_receive` or `_reject`, which the puller awaits before the next message.
        """
        if not self._owns(partition):
            return self._receive(partition, msg)
        head, _, thread_id = msg.subject.rpartition(".")
        parked = self._parked.get(thread_id)
        if parked is not None:  # older messages of the thread wait: this one waits too
            parked.messages[stream_sequence(msg)] = msg
            return None
        stream = self._manager.stream_of(thread_id)
        if stream is None or not self._egress.primed(thread_id, self._terms.get(partition, 0)):
            return self._receive(partition, msg)  # to load, create or prime: awaits
        namespace = head.rpartition(".")[2]
        try:
            event = self._decode(msg, namespace, thread_id)
        except _Rejected as rejected:
            return self._reject(msg, namespace, thread_id, rejected)
        if namespace_of(stream.state()) != namespace:  # another's: linked or unknown here
            return self._receive(partition, msg)  # `_stream_for` asks the links
        self._egress.bind(thread_id, namespace)
        self._submit(msg, thread_id, event, stream)
        return None

    async def _receive(self, partition: int, msg: Msg) -> None:
        thread_id = msg.subject.rpartition(".")[2]
        sequence = stream_sequence(msg)
        if not self._owns(partition):
            if partition in self._pullers and not self._stopping:
                # Still ours, overdue for a moment (a pause): a NAK would come back at
                # once, again and again until `max_deliver` drops it for good. It waits
                # here instead, in order, until the lease is renewed or lost (`abandon`
                # hands it back then).
                self._hold(msg, thread_id, sequence)
                return
            # A pull that outlived our lease (or a handover): the owner gets it now.
            await self._settle(msg.nak)
            return
        parked = self._parked.get(thread_id)
        if parked is not None:  # older messages of the thread wait: this one waits too
            parked.messages[sequence] = msg
            return
        await self._admit(msg, thread_id, sequence)

    async def _admit(self, msg: Msg, thread_id: str, sequence: int) -> None:
        """Decode `msg` and hand it to its thread's stream (or reject or park it).

        Parked messages are keyed by thread id alone (ids are unique across namespaces);
        each keeps its own subject, so its namespace (the sender's identity) is read here.
        """
        namespace = msg.subject.rpartition(".")[0].rpartition(".")[2]
        try:
            event = self._decode(msg, namespace, thread_id)
            stream = await self._stream_for(namespace, thread_id, event)
        except _Rejected as rejected:
            await self._reject(msg, namespace, thread_id, rejected)
            return
        except EventsNotRead as exc:  # NATS did not answer: not the store's fault either
            log.warning("thread's events not read; will retry", thread_id=thread_id, error=str(exc))
            self._park(msg, thread_id, sequence, exc)
            return
        except OreError as exc:  # the store failed: not the sender's fault, try later
            log.warning("ingress store failure; will retry", thread_id=thread_id, error=str(exc))
            if self._manager.store_health.failed(thread_id, exc):
                await self._egress.reply(
                    namespace,
                    thread_id,
                    NoticeEvent(
                        content=DELAYED_NOTICE, severity=Severity.WARN, context=event.context
                    ),
                )
            self._park(msg, thread_id, sequence, exc)
            return
        parked = self._parked.get(thread_id)
        if parked is not None and not parked.resuming:
            parked.messages[sequence] = msg  # its thread failed while we attached: wait
            return
        self._submit(msg, thread_id, event, stream)

    def _submit(self, msg: Msg, thread_id: str, event: IngressEvent, stream: Stream) -> None:
        """Hand the decoded `event` to its thread's stream (the caller saw that it is not
        parked behind older messages of its thread)."""
        delivery = _Delivery(msg, thread_id, stream, isinstance(event, InterruptEvent))
        entries = self._inflight.get(thread_id)
        if entries is None:
            entries = self._inflight[thread_id] = {}
        entries[msg.reply] = delivery
        try:
            stream.submit(
                event,
                on_handled=functools.partial(self._handled, delivery),
                on_retry=functools.partial(self._retry, delivery),
            )
        except SessionClosed as exc:  # closed while we attached: attach again
            del entries[msg.reply]
            self._forget_if_empty(thread_id)
            self._park(msg, thread_id, stream_sequence(msg), exc)

    # -- retries ------------------------------------------------------------------

    def _retry(self, delivery: _Delivery, error: OreError) -> None:
        """The stream handed this message back (stale copy or store failure): park it."""
        entries = self._inflight.get(delivery.thread_id)
        if entries is None or entries.pop(delivery.msg.reply, None) is None:
            return
        self._park(delivery.msg, delivery.thread_id, delivery.sequence, error)
        self._forget_if_empty(delivery.thread_id)

    def _park(self, msg: Msg, thread_id: str, sequence: int, error: OreError) -> None:
        """Hold `msg` (and its thread's newer messages) and try again after a delay:
        none for a stale copy or a closed stream, a backoff for a store failure (or
        events that could not be read)."""
        parked = self._parked.get(thread_id)
        if parked is None:
            parked = self._parked[thread_id] = _Parked()
        parked.messages[sequence] = msg
        delay = 0.0
        config = self._config
        if is_store_failure(error) or isinstance(error, EventsNotRead):
            failures = self._failures[thread_id] = self._failures.get(thread_id, 0) + 1
            delay = min(config.retry_delay * 2 ** (failures - 1), config.retry_delay_max)
        elif isinstance(error, StaleThread):
            # Lost a race with another writer of the thread: retry at once the first
            # time; if it keeps happening (two workers busy on one thread), back off by
            # a random, growing delay so one of them can finish its turn.
            races = self._failures[thread_id] = self._failures.get(thread_id, 0) + 1
            if races > 1:
                ceiling = min(_RACE_BACKOFF * 2 ** (races - 2), config.retry_delay_max)
                delay = random.uniform(0, ceiling)
        parked.resuming = False
        if parked.timer is not None:
            parked.timer.cancel()
        parked.timer = asyncio.get_running_loop().call_later(delay, self._resume, thread_id)

    def _hold(self, msg: Msg, thread_id: str, sequence: int) -> None:
        """Park `msg` until its partition's lease is usable again (see `_readmit`)."""
        parked = self._parked.get(thread_id)
        if parked is None:
            parked = self._parked[thread_id] = _Parked()
        parked.messages[sequence] = msg
        if parked.timer is None and not parked.resuming:
            loop = asyncio.get_running_loop()
            parked.timer = loop.call_later(_OWNED_CHECK, self._resume, thread_id)

    def _resume(self, thread_id: str) -> None:
        parked = self._parked.get(thread_id)
        if parked is None or self._stopping:
            return
        parked.timer = None
        parked.resuming = True
        # A job, not a loop: a bug in one thread's retry is logged and stops nothing else.
        self._retries.spawn(
            self._readmit(thread_id, parked), name=f"ore-ingress-retry-{thread_id}", critical=False
        )

    async def _readmit(self, thread_id: str, parked: _Parked) -> None:
        """Admit the parked messages oldest first, until one is parked again.

        While the thread's partition lease is overdue they wait on; once the partition
        is no longer pulled here, they are handed back.
        """
        partition = partition_of(thread_id, self._partitions)
        while parked.resuming and parked.messages:
            if not self._owns(partition):
                parked.resuming = False
                if partition in self._pullers and not self._stopping:
                    loop = asyncio.get_running_loop()
                    parked.timer = loop.call_later(_OWNED_CHECK, self._resume, thread_id)
                    return
                if self._parked.get(thread_id) is parked:
                    del self._parked[thread_id]
                for msg in parked.messages.values():
                    await self._settle(msg.nak)
                return
            sequence = min(parked.messages)
            await self._admit(parked.messages.pop(sequence), thread_id, sequence)
        if parked.resuming and self._parked.get(thread_id) is parked:
            del self._parked[thread_id]  # all admitted: the thread flows again

    def _decode(self, msg: Msg, namespace: str, thread_id: str) -> IngressEvent:
        if namespace not in self._namespaces:
            self._check_namespace(namespace)
        if not is_valid_thread_id(thread_id):
            raise _Rejected(
                BAD_THREAD_ID,
                f"invalid thread id {thread_id[:140]!r}: use 1-128 characters "
                "from A-Z, a-z, 0-9, '_' and '-'",
            )
        data = msg.data
        if len(data) > self._max_payload:
            raise _Rejected(
                TOO_LARGE,
                f"message of {len(data)} bytes is over the limit of {self._max_payload} bytes",
            )
        headers = msg.headers
        if headers:
            schema = headers.get(HEADER_SCHEMA)
            if schema is not None and schema not in INGRESS_SCHEMAS:
                raise _Rejected(
                    BAD_SCHEMA, f"unsupported {HEADER_SCHEMA} {schema!r}: this core speaks {SCHEMA}"
                )
        try:
            event = decode_ingress(data)
        except EventDecodeError as exc:
            raise _Rejected(classify(exc), str(exc)) from None
        claimed = event.context.provenance
        if claimed != namespace:
            if claimed:
                raise _Rejected(
                    IDENTITY,
                    f"context.provenance {claimed[:40]!r} does not match the namespace "
                    f"{namespace!r} this message was sent on: a conduit speaks only for its "
                    "own namespace (leave provenance empty; the core sets it)",
                    event.context.model_copy(update={"provenance": namespace}),
                )
            event = event.with_context(event.context.model_copy(update={"provenance": namespace}))
        return with_traceparent(event, headers) if headers else event

    def _check_namespace(self, namespace: str) -> None:
        """Refuse an invalid namespace; remember a valid one (a few conduits send all)."""
        if not is_valid_namespace(namespace):
            raise _Rejected(
                BAD_NAMESPACE,
                f"invalid namespace {namespace[:40]!r}: use 1-32 characters from a-z, 0-9, "
                "'_' and '-'",
            )
        if len(self._namespaces) >= _NAMESPACES_LIMIT:
            self._namespaces.clear()
        self._namespaces.add(namespace)

    async def _stream_for(self, namespace: str, thread_id: str, event: IngressEvent) -> Stream:
        try:
            stream = await self._manager.attach(thread_id)
        except ThreadCorrupt as exc:  # retrying reads the same bytes: tell the sender now
            raise _Rejected(
                CORRUPT_THREAD,
                f"thread {thread_id} is stored but cannot be read ({exc}); an operator "
                "must repair or delete it",
                event.context,
            ) from None
        except ThreadNotFound:
            if not isinstance(event, UserMessageEvent):
                raise self._unknown(namespace, thread_id, event) from None
            try:
                stream = await self._manager.create_with_id(thread_id, {NAMESPACE_KEY: namespace})
            except ThreadExists:  # created meanwhile by another worker or the control API
                stream = await self._manager.attach(thread_id)
        home = namespace_of(stream.state())
        if home != namespace and not (
            self._links is not None and await self._links.admits(namespace, thread_id)
        ):
            raise self._unknown(namespace, thread_id, event)
        self._egress.bind(thread_id, home)
        term = self._terms.get(partition_of(thread_id, self._partitions), 0)
        await self._egress.prime(thread_id, stream.state(), term)
        return stream

    @staticmethod
    def _unknown(namespace: str, thread_id: str, event: IngressEvent) -> _Rejected:
        """The answer for a thread that does not exist in `namespace` (or is another's)."""
        if isinstance(event, UserMessageEvent):
            hint = "this id is not available: use another thread id, or threads.lookup"
        else:
            hint = f"a {event.kind} needs an existing thread (send a user_message to create one)"
        return _Rejected(
            UNKNOWN_THREAD,
            f"thread {thread_id} does not exist in namespace {namespace}: {hint}",
            event.context,
        )

    async def _reject(self, msg: Msg, namespace: str, thread_id: str, rejected: _Rejected) -> None:
        reason, detail = rejected.reason, rejected.detail
        log.warning(
            "ingress message rejected",
            reason=reason,
            detail=detail,
            subject=msg.subject,
            thread_id=thread_id[:140],
        )
        data = msg.data
        record: dict[str, object] = {
            "reason": reason,
            "detail": detail,
            "subject": f"{self._raw_inbound}{namespace}.{thread_id}",
            "namespace": namespace,
            "thread_id": thread_id,
            "data": data[:DLQ_DATA_LIMIT].decode("utf-8", errors="replace"),
            "time": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
        }
        if len(data) > DLQ_DATA_LIMIT:
            record["truncated"] = True
        sequence = msg.metadata.sequence.stream
        await self._pipeline.publish(
            self._subjects.dlq(reason),
            jsonutil.dumps(record),
            {HEADER_SCHEMA: SCHEMA},
            msg_id=f"{self._subjects.inbound_stream}-{sequence}",
        )
        if reason not in (BAD_THREAD_ID, BAD_NAMESPACE):
            context = rejected.context
            await self._egress.reply(
                namespace,
                thread_id,
                ErrorEvent(message=detail, code=reason, context=context),
                LifecycleEvent(phase="done", context=context),
            )
        await self._settle(msg.ack)

    # -- acknowledgements -------------------------------------------------------

    def _handled(self, delivery: _Delivery) -> None:
        """The stream finished with this message: acknowledge it (and, for an interrupt,
        the queued messages it dropped, which are never handled themselves)."""
        entries = self._inflight.get(delivery.thread_id)
        if entries is None:
            return
        reply = delivery.msg.reply
        position = self._manager.sink_queued(self._egress.name)
        if delivery.interrupt:
            while entries:
                key, earlier = next(iter(entries.items()))
                del entries[key]
                self._acks.append((earlier.msg, position, delivery.thread_id))
                if key == reply:
                    break
        elif entries.pop(reply, None) is not None:
            self._acks.append((delivery.msg, position, delivery.thread_id))
        if self._failures:  # it saved: its backoff starts over
            self._failures.pop(delivery.thread_id, None)
        self._forget_if_empty(delivery.thread_id)
        self._ack_wakeup.set()

    def _forget_if_empty(self, thread_id: str) -> None:
        """Drop the thread's entry when nothing of it is in flight; wake `wait_handled`."""
        if self._inflight.get(thread_id):
            return
        self._inflight.pop(thread_id, None)
        self._handled_one.set()
        idle = self._idle
        if idle is not None and not self._inflight and not idle.done():
            idle.set_result(None)

    async def _ack_loop(self) -> None:
        # A handled message is acked only once its output is stored: first the egress
        # sink must have taken every event queued before it was handled, then the
        # pipeline must have stored everything published up to then. While a JetStream
        # limit holds output back, that waits, so a worker dying meanwhile loses nothing.
        while True:
            await self._ack_wakeup.wait()
            self._ack_wakeup.clear()
            while self._acks:
                position = self._acks[-1][1]
                await self._egress.wait_emitted(position)
                await self._pipeline.wait_stored(self._pipeline.mark())
                over_limit = False
                while self._acks and self._acks[0][1] <= position:
                    over_limit |= self._ack_now(self._acks.popleft()[0])
                if over_limit:
                    await wait_flushed(self._nc)

    async def _progress_loop(self) -> None:
        interval = self._config.backoff[0] / 3
        while True:
            await asyncio.sleep(interval)
            for entries in list(self._inflight.values()):
                for delivery in list(entries.values()):
                    if not delivery.stream.closed:
                        await self._settle(delivery.msg.in_progress)
            for msg, _, _ in list(self._acks):  # handled, output not stored yet
                await self._settle(msg.in_progress)
            for parked in list(self._parked.values()):  # waiting here, not forgotten
                for msg in list(parked.messages.values()):
                    await self._settle(msg.in_progress)

    async def _closed_loop(self) -> None:
        """Hand back deliveries whose stream closed under them (deleted, evicted, stale)."""
        while True:
            await asyncio.sleep(_CLOSED_CHECK)
            if self._stopping:
                continue
            for thread_id, entries in list(self._inflight.items()):
                for reply, delivery in list(entries.items()):
                    if delivery.stream.closed:
                        del entries[reply]
                        await self._settle(delivery.msg.nak)
                self._forget_if_empty(thread_id)

    def _ack_now(self, msg: Msg) -> bool:
        """`_settle(msg.ack)` without awaiting; True when the caller should `wait_flushed`."""
        if self._ack_wake is None:
            self._ack_wake = asyncio.get_running_loop().call_later(ACK_LINGER, self._wake_acks)
        try:
            return settle_now(self._nc, msg, wake=False)
        except NatsError as exc:
            log.debug("acknowledgement not sent", error=repr(exc))
            return False

    def _wake_acks(self) -> None:
        """Write the acks that linger (`_ack_now`) with whatever else is pending."""
        if self._ack_wake is not None:
            self._ack_wake.cancel()
            self._ack_wake = None
        wake_flusher(self._nc)

    @staticmethod
    async def _settle(action: Callable[[], Awaitable[object]]) -> None:
        """Send an ack, nak or progress; a lost one only means a later redelivery."""
        try:
            await action()
        except NatsError as exc:
            log.debug("acknowledgement not sent", error=repr(exc))
