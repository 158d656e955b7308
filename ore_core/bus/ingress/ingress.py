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

The jobs around it have modules of their own: decoding and its checks
(`bus/ingress/decoding.py`), bad input answered and recorded on `P.dlq.REASON`
(`bus/ingress/rejections.py`; a stored thread that cannot be decoded is treated the same way,
reason `corrupt_thread`, at once), the threads whose messages wait to be handled again
(`bus/ingress/parking.py`), and acknowledging what is handled once its output is stored
(`bus/ingress/acks.py`).

Failures are retried, never acknowledged away. When the store refuses a stale copy or
cannot save, the stream hands the message back and the thread is parked (the sender is
told once that the answer is delayed). If the worker stops or dies, parked messages
are redelivered by the server as usual.

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
import contextlib
import functools
import itertools
from collections.abc import AsyncIterator, Awaitable, Callable

import structlog
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.errors import Error as NatsError

from ore_core._nats.codec import CORRUPT_THREAD, namespace_of, stream_sequence
from ore_core.bridge.cache import LinkCache
from ore_core.bus.egress.egress import Egress, EventsNotRead
from ore_core.bus.egress.pipeline import Pipeline
from ore_core.bus.ingress.acks import AckBatcher, settle
from ore_core.bus.ingress.decoding import IngressDecoder, Rejected, unknown_thread
from ore_core.bus.ingress.inflight import Delivery, InFlight
from ore_core.bus.ingress.parking import Parked, Parking
from ore_core.bus.ingress.puller import Puller
from ore_core.bus.ingress.rejections import Rejections
from ore_core.bus.server.streams import BusConfig, consumer_name, reset_consumer
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
    IngressEvent,
    InterruptEvent,
    NoticeEvent,
    Severity,
    UserMessageEvent,
)
from ore_core.session.manager import Manager
from ore_core.session.store_health import DELAYED_NOTICE
from ore_core.session.stream import Stream
from ore_core.subjects import NAMESPACE_KEY, Subjects, partition_of
from ore_core.tasks import TaskScope

__all__ = ["Ingress"]

log = structlog.get_logger("ore.bus")

_RESET_TIMEOUT = 2.0  # seconds per JetStream request of a consumer reset (then retried)
_CLOSED_CHECK = 0.5  # seconds between looks for deliveries whose stream was closed


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
        self._batch = batch
        self._owns = owns
        self._holds = owns if holds is None else holds
        self._handover_grace = handover_grace
        self._partitions = config.partition_count
        self._inflight = InFlight(config.partition_count)
        self._pullers: dict[int, Puller] = {}
        # The term of each partition's ownership (one per lease won): a thread primed in
        # an earlier term is primed again (`Egress.prime`): the partition was away, and
        # another worker may have appended to its threads' events meanwhile.
        self._terms: dict[int, int] = {}
        self._term_count = itertools.count(1)
        self._recycling: set[int] = set()
        # Partitions whose puller is being stopped: its pull requests may still deliver.
        self._draining: set[int] = set()
        self.tasks = TaskScope("ingress")
        """The ack, progress and closed-stream loops and, as children, the pullers'
        watchdogs, partition recycles and the retries of parked threads (the core adopts
        it)."""
        self._retries = self.tasks.child("retry")
        self._recycles = self.tasks.child("recycle")
        self._stopping = False
        self._decoder = IngressDecoder(config.max_payload)
        self._rejections = Rejections(subjects, pipeline, egress)
        self._acks = AckBatcher(nc, egress, pipeline)
        self._parking = Parking(
            config,
            admit=self._admit,
            owns=owns,
            pulled=self._pulled,
            stopping=lambda: self._stopping,
            retries=self._retries,
        )

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
    def tallies(self) -> tuple[dict[str, int], dict[str, int], int]:
        """Messages dead-lettered so far by reason, parked for a retry by why (`store`,
        `stale`, `other`), and redelivered: live counts the metrics read at each scrape."""
        return self._rejections.counts, self._parking.counts, self._decoder.redelivered

    @property
    def inflight(self) -> int:
        """Messages submitted to streams and not yet acknowledged."""
        return len(self._inflight)

    # -- lifetime ---------------------------------------------------------------

    async def start(self) -> None:
        """Start the acknowledgement, progress and closed-stream loops; partitions are
        pulled as they are acquired (`acquire`)."""
        self.tasks.spawn(self._acks.run(), name="ore-ingress-ack")
        self.tasks.spawn(self._progress_loop(), name="ore-ingress-progress")
        self.tasks.spawn(self._closed_loop(), name="ore-ingress-closed")

    async def acquire(
        self,
        partition: int,
        *,
        fresh: bool = True,
        settle: float = 0.0,
        claimed_back: bool = False,
    ) -> None:
        """Start pulling `partition`, just won: reset its consumer if its owner died.

        Streams of its threads that are open here were opened without owning them (the
        control API) and may be stale: they are dropped first, so the next message
        loads the thread from the store. `claimed_back`: the lease lapsed at this
        worker and nobody else held it since (its own unacknowledged messages are
        what the reset hands back, not a lost worker's).
        """
        if self._stopping or partition in self._pullers:
            return
        if fresh:
            self._terms[partition] = next(self._term_count)
            await self._drop_streams(partition)
        start = await _reset(
            self._nc,
            self._subjects,
            self._config,
            partition,
            settle,
            lambda: not self._stopping and self._owns(partition),
        )
        if start is not None and claimed_back:
            log.info("partition resumed from its ack floor", partition=partition, start=start)
        elif start is not None:
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

    async def release(self, partition: int) -> None:
        """Hand `partition` over: stop pulling, let its turns finish (bounded), close.

        The lease is still ours meanwhile, so finished turns are saved and acked;
        turns still running after `handover_grace` are cut and handed back.
        """
        async with self._unpulled(partition) as puller:
            if puller is not None:
                await puller.stop()
        await self._wait_handled(partition)
        for stream in self._streams_of(partition):
            await stream.close()
        await self._hand_back(partition)

    @contextlib.asynccontextmanager
    async def _unpulled(self, partition: int) -> AsyncIterator[Puller | None]:
        """Take the partition's puller out (for the caller to stop) while its open pull
        requests may still deliver: what arrives meanwhile for a partition no longer
        owned is held (`_not_owned`), and the caller hands it back once the puller has
        stopped. A NAK sent while a pull request is still open comes straight back to
        it, again and again: after `max_deliver` round trips (milliseconds) the server
        gives the message up for good, acknowledged to its sender and never handled."""
        puller = self._pullers.pop(partition, None)
        self._draining.add(partition)
        try:
            yield puller
        finally:
            self._draining.discard(partition)

    def _pulled(self, partition: int) -> bool:
        """Whether a pull of `partition` may still deliver here (and we are not stopping)."""
        return (partition in self._pullers or partition in self._draining) and not self._stopping

    async def _wait_handled(self, partition: int) -> None:
        try:
            async with asyncio.timeout(self._handover_grace):
                await self._inflight.wait_partition(partition)
        except TimeoutError:
            log.warning("handover grace over; cutting turns", partition=partition)

    async def abandon(self, partition: int) -> None:
        """The lease on `partition` is lost: drop its streams unsaved, hand messages back.

        Handled messages whose output the egress has not taken yet are handed back too:
        it will drop that output (the threads left), so the next owner answers them
        (the stored answer, found by `Egress.prime`) instead of nobody.
        """
        async with self._unpulled(partition) as puller:
            await self._drop_streams(partition)  # first: nothing of it may be written any more
            if puller is not None:
                await puller.stop()
        await self._hand_back(partition)
        count = self._partitions
        emitted = self._egress.emitted
        unstored = self._acks.take(
            lambda thread_id, position: (
                position > emitted and partition_of(thread_id, count) == partition
            )
        )
        for msg, _, thread_id in unstored:
            self._egress.release(thread_id)
            await settle(msg.nak)

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
        parked = self._parking.stop_retry(thread_id)
        for msg, _, _ in self._acks.take(lambda t, p: t == thread_id and p > position):
            parked.messages[stream_sequence(msg)] = msg
        for delivery in self._inflight.pop_thread(thread_id):
            parked.messages[delivery.sequence] = delivery.msg
        if self._stopping:
            return  # `stop` hands parked messages back (or the server does, after ack_wait)
        self._retries.spawn(
            self._reload(thread_id, parked), name=f"ore-ingress-reload-{thread_id}", critical=False
        )

    async def _reload(self, thread_id: str, parked: Parked) -> None:
        """Drop the thread's stream unsaved, then handle its parked messages again."""
        stream = self._manager.stream_of(thread_id)
        if stream is not None:
            await stream.abandon()
        for delivery in self._inflight.pop_thread(thread_id):  # submitted while we dropped it
            parked.messages[delivery.sequence] = delivery.msg
        threads = self._parking.threads
        if threads.get(thread_id) is not parked or not parked.messages:
            if threads.get(thread_id) is parked:
                del threads[thread_id]
            return  # handed back meanwhile (the partition was lost), or nothing to redo
        sequence = min(parked.messages)
        error = StaleThread(f"thread {thread_id}: output dropped while the lease was overdue")
        self._parking.park(parked.messages.pop(sequence), thread_id, sequence, error)

    async def drop_thread(self, thread_id: str) -> None:
        """Another worker wrote the thread (fencing): drop it unsaved, hand back its messages."""
        try:
            await self._manager.get(thread_id).abandon()
        except SessionNotFound:
            pass
        self._egress.release(thread_id)
        for delivery in self._inflight.pop_thread(thread_id):
            await settle(delivery.msg.nak)

    async def _drop_streams(self, partition: int) -> None:
        for stream in self._streams_of(partition):
            await stream.abandon()
            self._egress.release(stream.id)

    def _streams_of(self, partition: int) -> list[Stream]:
        count = self._partitions
        return [s for s in self._manager.list() if partition_of(s.id, count) == partition]

    async def _hand_back(self, partition: int, *, forget: bool = True) -> None:
        count = self._partitions
        for msg in self._parking.take(lambda thread: partition_of(thread, count) == partition):
            await settle(msg.nak)
        for thread_id in self._inflight.of_partition(partition):
            if forget:
                self._egress.release(thread_id)
            for delivery in self._inflight.pop_thread(thread_id):
                await settle(delivery.msg.nak)

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
            async with self._unpulled(partition) as puller:
                if puller is None:
                    return
                await puller.stop()
            await self._wait_handled(partition)
            await self._hand_back(partition, forget=False)
            await self._acks.flush()  # so the consumer's ack floor is as high as it can be
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
        await self._inflight.wait_idle()

    async def stop(self) -> None:
        """After the streams closed: send pending acks, hand the rest back for redelivery.

        Raises TaskCrashed if a loop crashed (unless the core's scope reports it).
        """
        await self.stop_pulling()
        unfinished = [delivery.msg for delivery in self._inflight.pop_all()]
        for msg in unfinished:
            await settle(msg.nak)
        if unfinished:
            log.info("unfinished messages handed back for redelivery", count=len(unfinished))
        for msg in self._parking.take(lambda thread_id: True):
            await settle(msg.nak)  # the next worker (or this one, restarted)
        try:
            await self.tasks.aclose()
        finally:
            await self._acks.settle_all()
            self._acks.write()  # what lingers goes now, before the connection closes

    # -- one message ------------------------------------------------------------

    def _deliver(self, partition: int, msg: Msg) -> Awaitable[None] | None:
        """Handle `msg` of `partition`; what the puller must await first, if anything.

        The common case, a message of a thread whose stream is open (and primed) here,
        is handled right in the connection's read loop, with no task or coroutine
        (`_admit`); the rest returns a coroutine that the puller awaits before the next
        message.
        """
        thread_id = msg.subject.rpartition(".")[2]
        if not self._owns(partition):
            return self._not_owned(partition, msg, thread_id)
        parked = self._parking.threads.get(thread_id)
        if parked is not None:  # older messages of the thread wait: this one waits too
            parked.messages[stream_sequence(msg)] = msg
            return None
        return self._admit(msg, thread_id, partition)

    async def _not_owned(self, partition: int, msg: Msg, thread_id: str) -> None:
        if self._pulled(partition):
            # Still ours, overdue for a moment (a pause), or being dropped with its pull
            # requests still open: a NAK would come back at once, again and again until
            # `max_deliver` drops it for good. It waits here instead, in order, until
            # the lease is renewed or lost (`abandon` hands it back once the puller has
            # stopped).
            self._parking.hold(msg, thread_id, stream_sequence(msg))
            return
        # A pull that outlived our lease (or a handover): the owner gets it now.
        await settle(msg.nak)

    def _admit(self, msg: Msg, thread_id: str, partition: int) -> Awaitable[None] | None:
        """Decode `msg` and hand it to its thread's stream; what must be awaited first.

        Nothing when its thread's stream is open and primed here (the message is
        submitted now); else the coroutine that loads, creates or primes the thread, or
        rejects the message. Parked messages are keyed by thread id alone (ids are
        unique across namespaces); each keeps its own subject, so its namespace (the
        sender's identity) is read here.
        """
        namespace = msg.subject.rpartition(".")[0].rpartition(".")[2]
        stream = self._manager.stream_of(thread_id)
        if stream is None or not self._egress.primed(thread_id, self._terms.get(partition, 0)):
            return self._attach_and_admit(msg, namespace, thread_id, partition)
        if namespace_of(stream.state()) != namespace:  # another's: linked, or unknown here
            return self._attach_and_admit(msg, namespace, thread_id, partition)
        try:
            event = self._decoder.decode(msg, namespace, thread_id)
            self._bind(stream, namespace, thread_id, event)
        except Rejected as rejected:
            return self._rejections.reject(msg, namespace, thread_id, rejected)
        self._submit(msg, thread_id, event, stream)
        return None

    async def _attach_and_admit(
        self, msg: Msg, namespace: str, thread_id: str, partition: int
    ) -> None:
        """`_admit` for a thread to load, create or prime first (or reject, or park)."""
        try:
            event = self._decoder.decode(msg, namespace, thread_id)
            stream = await _attach(self._manager, namespace, thread_id, event)
            self._bind(stream, namespace, thread_id, event, await self._linked(stream, namespace))
            await self._egress.prime(thread_id, stream.state(), self._terms.get(partition, 0))
        except Rejected as rejected:
            await self._rejections.reject(msg, namespace, thread_id, rejected)
            return
        except EventsNotRead as exc:  # NATS did not answer: not the store's fault either
            log.warning("thread's events not read; will retry", thread_id=thread_id, error=str(exc))
            self._parking.park(msg, thread_id, stream_sequence(msg), exc)
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
            self._parking.park(msg, thread_id, stream_sequence(msg), exc)
            return
        # Its thread failed while we attached: this one waits behind what was parked.
        if not self._parking.waits_unless_resuming(msg, thread_id, stream_sequence(msg)):
            self._submit(msg, thread_id, event, stream)

    def _bind(
        self,
        stream: Stream,
        namespace: str,
        thread_id: str,
        event: IngressEvent,
        linked: bool = False,
    ) -> None:
        """Refuse a thread of another namespace (as unknown) unless `linked`; its output
        goes to its home namespace (and, by the egress, to the linked ones)."""
        home = namespace_of(stream.state())
        if home != namespace and not linked:
            raise unknown_thread(namespace, thread_id, event)
        self._egress.bind(thread_id, home)

    async def _linked(self, stream: Stream, namespace: str) -> bool:
        """Whether a link lets `namespace` send into the thread of another (in, inout)."""
        if self._links is None or namespace_of(stream.state()) == namespace:
            return False
        return await self._links.admits(namespace, stream.id)

    def _submit(self, msg: Msg, thread_id: str, event: IngressEvent, stream: Stream) -> None:
        """Hand the decoded `event` to its thread's stream (the caller saw that it is not
        parked behind older messages of its thread)."""
        delivery = Delivery(msg, thread_id, stream, isinstance(event, InterruptEvent))
        entries = self._inflight.add(delivery)
        try:
            stream.submit(
                event,
                on_handled=functools.partial(self._handled, delivery),
                on_retry=functools.partial(self._retry, delivery),
            )
        except SessionClosed as exc:  # closed while we attached: attach again
            del entries[msg.reply]
            self._inflight.forget_if_empty(thread_id)
            self._parking.park(msg, thread_id, stream_sequence(msg), exc)

    def _retry(self, delivery: Delivery, error: OreError) -> None:
        """The stream handed this message back (stale copy or store failure): park it."""
        entries = self._inflight.threads.get(delivery.thread_id)
        if entries is None or entries.pop(delivery.msg.reply, None) is None:
            return
        self._parking.park(delivery.msg, delivery.thread_id, delivery.sequence, error)
        self._inflight.forget_if_empty(delivery.thread_id)

    # -- acknowledgements -------------------------------------------------------

    def _handled(self, delivery: Delivery) -> None:
        """The stream finished with this message: acknowledge it (and, for an interrupt,
        the queued messages it dropped, which are never handled themselves)."""
        entries = self._inflight.threads.get(delivery.thread_id)
        if entries is None:
            return
        reply = delivery.msg.reply
        position = self._manager.sink_queued(self._egress.name)
        acks = self._acks
        if delivery.interrupt:
            while entries:
                key, earlier = next(iter(entries.items()))
                del entries[key]
                acks.add(earlier.msg, position, delivery.thread_id)
                if key == reply:
                    break
        elif entries.pop(reply, None) is not None:
            acks.add(delivery.msg, position, delivery.thread_id)
        self._parking.saved(delivery.thread_id)  # it saved: its backoff starts over
        self._inflight.forget_if_empty(delivery.thread_id)
        acks.wake()

    async def _progress_loop(self) -> None:
        """Keep what waits here in progress: in flight, handled (output not stored yet)
        and parked messages."""
        interval = self._config.backoff[0] / 3
        while True:
            await asyncio.sleep(interval)
            for delivery in self._inflight:
                if not delivery.stream.closed:
                    await settle(delivery.msg.in_progress)
            for msg in self._acks.messages() + self._parking.messages():
                await settle(msg.in_progress)

    async def _closed_loop(self) -> None:
        """Hand back deliveries whose stream closed under them (deleted, evicted, stale)."""
        while True:
            await asyncio.sleep(_CLOSED_CHECK)
            if self._stopping:
                continue
            for thread_id, entries in list(self._inflight.threads.items()):
                for reply, delivery in list(entries.items()):
                    if delivery.stream.closed:
                        del entries[reply]
                        await settle(delivery.msg.nak)
                self._inflight.forget_if_empty(thread_id)


async def _attach(manager: Manager, namespace: str, thread_id: str, event: IngressEvent) -> Stream:
    """The stream of `thread_id`, loaded, or created for a user message (Rejected when
    it is corrupt, or unknown to a message that cannot create it)."""
    try:
        return await manager.attach(thread_id)
    except ThreadCorrupt as exc:  # retrying reads the same bytes: tell the sender now
        # The cause names the store's file: the log keeps it, the sender never sees it.
        log.error("thread cannot be read", thread_id=thread_id, error=str(exc))
        raise Rejected(
            CORRUPT_THREAD, ThreadCorrupt.public_message(thread_id), event.context
        ) from None
    except ThreadNotFound:
        if not isinstance(event, UserMessageEvent):
            raise unknown_thread(namespace, thread_id, event) from None
    try:
        return await manager.create_with_id(thread_id, {NAMESPACE_KEY: namespace})
    except ThreadExists:  # created meanwhile by another worker or the control API
        return await manager.attach(thread_id)


async def _reset(
    nc: NatsClient,
    subjects: Subjects,
    config: BusConfig,
    partition: int,
    settle: float,
    holding: Callable[[], bool],
) -> int | None:
    """`reset_consumer`, retried while `holding()` (this worker holds the lease).

    After a NATS node crash the partition's consumer may have no leader for a while
    (an election on a busy cluster takes seconds): each try is short and the next
    follows at once, instead of giving the lease up and claiming it again later.
    """
    delay = 0.1
    resume: dict[int, int] = {}  # the start found before a delete, for the next try
    while True:
        try:
            return await reset_consumer(
                nc.jetstream(),
                subjects,
                config,
                partition,
                settle=settle,
                request_timeout=_RESET_TIMEOUT,
                resume=resume,
            )
        except (NatsError, TimeoutError) as exc:
            if not holding():
                raise
            log.debug("partition consumer not reset yet", partition=partition, error=repr(exc))
        await asyncio.sleep(delay)
        delay = min(delay * 2, 1.0)
