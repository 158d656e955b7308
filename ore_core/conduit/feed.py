"""EventFeed: a conduit's ordered stream of output events, without gaps.

Live (`durable=None`): subscribes `P.out.T` (or `P.out.*`). Stored events carry
`Nats-Sequence` and `Nats-Last-Sequence` (the previous sequence of the same thread);
when the previous one is not the last one this feed saw, the missing events are read
from `ORE_EVENTS` (`P.ev.T`, by sequence) and delivered first, so stored events of a
thread always arrive in order and complete. After a reconnect the feed reads what was
stored meanwhile the same way. Deltas are delivered as they come (best effort).

Durable (`durable=NAME`): stored events come from a durable JetStream consumer on
`ORE_EVENTS` that remembers what was acknowledged, so a conduit that was stopped
receives everything produced meanwhile when it starts again; deltas still come live.
An event is acknowledged when the reader asks for the next one (or leaves the
`async with` block without an error), so an event being handled when the process
dies is delivered again: handle events idempotently.
"""

from __future__ import annotations

import asyncio
import re
from collections import deque
from collections.abc import Awaitable, Callable, Collection
from typing import Any, Literal

import structlog
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.errors import Error as NatsError
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy, RawStreamMsg
from nats.js.client import JetStreamContext
from nats.js.errors import NotFoundError

from ore_core import jsonutil
from ore_core.conduit.connection import PermissionWatch, subscriptions_registered
from ore_core.errors import BusError, OreError, PermissionDenied
from ore_core.events import BATCH_KIND, OutputEvent, decode_output_value
from ore_core.ids import validate_thread_id
from ore_core.subjects import HEADER_KIND, HEADER_LAST_SEQUENCE, Subjects

__all__ = ["DURABLE_NAME", "Delivery", "EventFeed", "durable_consumer_name"]

HEADER_SEQUENCE = "Nats-Sequence"  # set by RePublish: this event's ORE_EVENTS sequence
DURABLE_NAME = re.compile(r"[A-Za-z0-9-]{1,64}")
"""Durable names: no `_`, so `<name>_<thread>` consumer names never collide."""

log = structlog.get_logger("ore.bus.feed")

_FETCH_WAIT = 5.0  # seconds a pull waits on the server before asking again
_RETRY_PAUSE = 1.0  # seconds between fetch attempts while the server is unreachable


class Delivery:
    """One output event of one thread.

    `sequence` is the sequence in `ORE_EVENTS` of the stored batch the event came in
    (increasing per thread; the events of one batch share it), or None for live-only
    events, which are never stored. `kind` is known at once; `event` is decoded and
    validated on first access (a reader usually looks at `kind` first, and most
    events of a turn are not rendered), and raises EventDecodeError for a malformed
    event (the core never sends one).
    """

    __slots__ = ("_event", "_value", "kind", "sequence", "thread_id")

    def __init__(self, thread_id: str, event: OutputEvent, sequence: int | None) -> None:
        self.thread_id = thread_id
        self.sequence = sequence
        self.kind: str = event.kind
        self._event: OutputEvent | None = event
        self._value: dict[str, Any] | None = None

    @classmethod
    def of_value(
        cls, thread_id: str, kind: str, value: dict[str, Any], sequence: int | None
    ) -> Delivery:
        """A delivery decoded lazily from the parsed JSON `value` of an event."""
        delivery = cls.__new__(cls)
        delivery.thread_id = thread_id
        delivery.sequence = sequence
        delivery.kind = kind
        delivery._event = None
        delivery._value = value
        return delivery

    @property
    def event(self) -> OutputEvent:
        """The decoded event."""
        event = self._event
        if event is None:
            assert self._value is not None
            event = self._event = decode_output_value(self._value)
            self._value = None
        return event

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Delivery):
            return NotImplemented
        return (self.thread_id, self.event, self.sequence) == (
            other.thread_id,
            other.event,
            other.sequence,
        )

    def __hash__(self) -> int:
        return hash((self.thread_id, self.kind, self.sequence))

    def __repr__(self) -> str:
        return (
            f"Delivery(thread_id={self.thread_id!r}, event={self.event!r}, "
            f"sequence={self.sequence!r})"
        )


def durable_consumer_name(durable: str, thread_id: str | None) -> str:
    """The JetStream consumer behind `events(thread_id, durable=durable)`.

    `durable` alone for all threads, `<durable>_<thread>` for one thread.
    """
    if DURABLE_NAME.fullmatch(durable) is None:
        raise ValueError(
            f"invalid durable name {durable!r}: use 1-64 characters from A-Z, a-z, 0-9 and '-'"
        )
    return durable if thread_id is None else f"{durable}_{validate_thread_id(thread_id)}"


_Item = tuple[Literal["live", "stored"], Msg] | tuple[Literal["resync", "refused", "end"], None]
_STREAM_NOT_FOUND = 10059  # JetStream's error code; 10037 is "no message found"


class EventFeed:
    """Output events of one thread (or of all threads) as `Delivery` objects.

    Use `async with client.events(...) as feed:` and then `async for delivery in
    feed:`; entering subscribes, so publish after it and nothing is missed. A feed is
    consumed by one task. `kinds` keeps only events of those kinds.
    """

    def __init__(
        self,
        nc: NatsClient,
        subjects: Subjects,
        *,
        thread_id: str | None = None,
        kinds: Collection[str] | None = None,
        durable: str | None = None,
        request_timeout: float = 5.0,
        prefetch: int = 64,
        ack_wait: float = 30.0,
        permissions: PermissionWatch | None = None,
        on_close: Callable[[EventFeed], object] | None = None,
    ) -> None:
        self.thread_id = None if thread_id is None else validate_thread_id(thread_id)
        self.kinds = frozenset(kinds or ())
        self.durable = durable
        self._consumer = None if durable is None else durable_consumer_name(durable, thread_id)
        self._nc = nc
        self._js: JetStreamContext = nc.jetstream(timeout=request_timeout)
        self._subjects = subjects
        self._permissions = permissions or PermissionWatch()
        self._on_close = on_close
        self._ack_wait = ack_wait
        self._prefetch = prefetch
        self._queue: asyncio.Queue[_Item] = asyncio.Queue()
        self._ready: deque[Delivery] = deque()
        self._seen: dict[str, int] = {}  # thread -> last stored sequence delivered
        self._floor = 0  # last stored sequence before this feed started
        self._live: Subscription | None = None
        self._unwatch: Callable[[], None] | None = None
        self._refusal: PermissionDenied | None = None
        self._fetcher: asyncio.Task[None] | None = None
        self._permits = asyncio.Semaphore(prefetch)
        self._unacked: Msg | None = None
        self._unacked_tail: Delivery | None = None  # the last event of `_unacked`
        self._last_stored = 0  # highest sequence the durable consumer delivered to the reader
        self._started = False
        self._closed = False

    # -- lifetime -------------------------------------------------------------

    @property
    def _stored_filter(self) -> str:
        if self.thread_id is None:
            return self._subjects.events_wildcard
        return self._subjects.events(self.thread_id)

    async def start(self) -> EventFeed:
        """Subscribe (and create the durable consumer). Idempotent; `async with` calls it."""
        if self._started:
            return self
        self._started = True
        try:
            if self._consumer is not None:
                await self._open_durable(self._consumer)
            else:
                # Read the floor before subscribing: an event stored in between shows up
                # as a gap at the next event and is caught up, never skipped.
                self._floor = await self._last_sequence()
            output = (
                self._subjects.output_wildcard
                if self.thread_id is None
                else self._subjects.output(self.thread_id)
            )
            self._unwatch = self._permissions.watch_subscription(output, self._on_refused)
            self._live = await self._nc.subscribe(output, cb=self._on_live)
            await subscriptions_registered(self._nc)
            if self._refusal is not None:
                raise self._refusal
        except BaseException:
            await self.close()
            raise
        return self

    async def _open_durable(self, name: str) -> None:
        stream = self._subjects.events_stream
        config = ConsumerConfig(
            name=name,
            durable_name=name,
            description=f"ore conduit feed {name}",
            filter_subject=self._stored_filter,
            # A new durable starts now: a conduit deployed today must not replay last
            # month's replies. Restarts continue from the last acknowledged event.
            deliver_policy=DeliverPolicy.NEW,
            ack_policy=AckPolicy.EXPLICIT,
            ack_wait=self._ack_wait,
        )
        # The subject nats-py sends the create request to, so a refusal is reported.
        create = f"$JS.API.CONSUMER.CREATE.{stream}.{name}.{self._stored_filter}"
        try:
            await self._permissions.guard(create, self._js.add_consumer(stream, config))
            pull = await self._js.pull_subscribe_bind(durable=name, stream=stream)
        except NatsError as exc:
            raise BusError(
                f"cannot open durable consumer {name} on stream {stream}: {exc}. "
                "Is `ore serve` running, and may this user create consumers on it?"
            ) from exc
        self._fetcher = asyncio.get_running_loop().create_task(
            self._fetch(pull), name=f"ore-feed-{name}"
        )

    async def close(self) -> None:
        """Unsubscribe and hand unfinished stored events back to the durable consumer.

        The event read last counts as unfinished (the next feed with this durable name
        gets it again) unless the `async with` block ended without an error.
        Idempotent.
        """
        if self._closed:
            return
        self._closed = True
        fetcher, self._fetcher = self._fetcher, None
        # nats-py's fetch runs asyncio.wait_for in a task of its own, and on 3.11 that
        # can swallow a cancel racing an arriving message: repeat until it really ends.
        while fetcher is not None and not fetcher.done():
            fetcher.cancel()
            await asyncio.wait([fetcher], timeout=0.1)
        if self._unwatch is not None:
            self._unwatch()
        live, self._live = self._live, None
        if live is not None and not self._nc.is_closed:
            try:
                await live.unsubscribe()
            except NatsError as exc:
                log.debug("unsubscribe failed", error=str(exc))
        # Unfinished stored events go back to the consumer now, not after ack_wait.
        unfinished = [] if self._unacked is None else [self._unacked]
        self._unacked = self._unacked_tail = None
        while not self._queue.empty():
            source, msg = self._queue.get_nowait()
            if source == "stored" and msg is not None:
                unfinished.append(msg)
        for msg in unfinished:
            await self._settle(msg.nak())
        self._queue.put_nowait(("end", None))
        if self._on_close is not None:
            self._on_close(self)

    async def __aenter__(self) -> EventFeed:
        return await self.start()

    async def __aexit__(self, exc_type: type[BaseException] | None, *rest: object) -> None:
        if exc_type is None and self._batch_read():
            await self._ack_pending()
        await self.close()  # a batch not read to its end is handed back whole

    def resync(self) -> None:
        """Catch up on stored events after a reconnect (called by the client)."""
        if self._consumer is None and not self._closed:
            self._queue.put_nowait(("resync", None))

    # -- reading --------------------------------------------------------------

    def __aiter__(self) -> EventFeed:
        return self

    async def __anext__(self) -> Delivery:
        if not self._started:
            await self.start()
        if self._batch_read():
            # The stored message read last is done with only once all of its events
            # (a batch) were read: acknowledging earlier could lose the rest in a crash.
            await self._ack_pending()
        while not self._ready:
            source, msg = await self._queue.get()
            if source == "end":
                self._queue.put_nowait(("end", None))  # later calls end too
                raise StopAsyncIteration
            if source == "refused" and self._refusal is not None:
                raise self._refusal
            if source == "resync":
                await self._catch_up(self._stored_filter, self._high_water() + 1, None)
            elif source == "live" and msg is not None:
                await self._accept_live(msg)
            elif msg is not None:
                await self._accept_stored(msg)
        return self._ready.popleft()

    def _batch_read(self) -> bool:
        """True when the reader has taken every event of the unacknowledged message."""
        tail = self._unacked_tail
        return tail is None or not any(delivery is tail for delivery in self._ready)

    async def _ack_pending(self) -> None:
        self._unacked_tail = None
        msg, self._unacked = self._unacked, None
        if msg is not None:
            await self._settle(msg.ack())
            self._permits.release()

    async def _settle(self, ack: Awaitable[None]) -> None:
        try:
            await ack
        except NatsError as exc:  # redelivered later: the reader sees it again
            log.warning("acknowledgement failed", durable=self.durable, error=str(exc))

    async def _on_live(self, msg: Msg) -> None:
        self._queue.put_nowait(("live", msg))

    def _on_refused(self, error: PermissionDenied) -> None:
        # The server may refuse the subscription after start() returned: tell the reader.
        self._refusal = error
        self._queue.put_nowait(("refused", None))

    async def _accept_live(self, msg: Msg) -> None:
        headers = msg.headers or {}
        thread_id = self._subjects.thread_id_of(msg.subject)
        sequence_text = headers.get(HEADER_SEQUENCE)
        if sequence_text is None:  # a delta, published straight to P.out: never stored
            self._deliver(thread_id, msg.data, headers.get(HEADER_KIND), None)
            return
        if self._consumer is not None:
            return  # the durable consumer delivers stored events, in order
        sequence = int(sequence_text)
        seen = self._seen.get(thread_id, self._floor)
        if sequence <= seen:
            return  # already delivered by a catch-up
        previous = int(headers.get(HEADER_LAST_SEQUENCE, "0"))
        if previous > seen:
            log.info("gap in output, catching up", thread_id=thread_id, after=seen, to=previous)
            await self._catch_up(self._subjects.events(thread_id), seen + 1, previous)
        self._seen[thread_id] = sequence
        self._deliver(thread_id, msg.data, headers.get(HEADER_KIND), sequence)

    async def _accept_stored(self, msg: Msg) -> None:
        sequence = msg.metadata.sequence.stream
        thread_id = self._subjects.thread_id_of(msg.subject)
        kind = (msg.headers or {}).get(HEADER_KIND)
        if sequence > self._last_stored and self._deliver(thread_id, msg.data, kind, sequence):
            self._last_stored = sequence
            self._unacked = msg  # acked when the reader asks for the event after its last
            self._unacked_tail = self._ready[-1]
            return
        # Filtered out, undecodable, or redelivered after it was read: done with it.
        await self._settle(msg.ack())
        self._permits.release()

    def _deliver(self, thread_id: str, data: bytes, kind: str | None, sequence: int | None) -> bool:
        """Queue the event(s) of one message for the reader; False when none is kept.

        A `batch` (every stored message, and live events sent together) is unpacked:
        its events are delivered one by one, in order, all with the batch's sequence.
        Events are parsed here (one JSON parse per message) and validated only when
        the reader asks for `Delivery.event`.
        """
        kinds = self.kinds
        if kinds and kind is not None and kind != BATCH_KIND and kind not in kinds:
            return False
        try:
            value = jsonutil.loads(data)
        except ValueError as exc:
            log.warning("undecodable output message skipped", thread_id=thread_id, error=str(exc))
            return False
        if not isinstance(value, dict):
            return False
        if value.get("kind") == BATCH_KIND:
            items = value.get("events")
            if not isinstance(items, list):
                log.warning("output batch without events skipped", thread_id=thread_id)
                return False
        else:
            items = [value]
        ready = self._ready
        kept = False
        for item in items:
            item_kind = item.get("kind") if isinstance(item, dict) else None
            if not isinstance(item_kind, str) or not item_kind:
                log.warning("output event without a kind skipped", thread_id=thread_id)
                continue
            if not kinds or item_kind in kinds:
                ready.append(Delivery.of_value(thread_id, item_kind, item, sequence))
                kept = True
        return kept

    # -- stored events --------------------------------------------------------

    def _high_water(self) -> int:
        return max(self._floor, *self._seen.values()) if self._seen else self._floor

    async def _get_stored(
        self, subject: str, sequence: int | None = None, *, after: bool = False
    ) -> RawStreamMsg:
        """The last message on `subject`, or with `after` the first from `sequence` on."""
        stream = self._subjects.events_stream
        request = self._js.get_msg(stream, seq=sequence, subject=subject, next=after)
        return await self._permissions.guard(f"$JS.API.STREAM.MSG.GET.{stream}", request)

    async def _last_sequence(self) -> int:
        try:
            last = await self._get_stored(self._stored_filter)
        except NotFoundError as exc:
            self._check_stream(exc)
            return 0
        except NatsError as exc:
            raise self._read_error(exc) from exc
        return int(last.seq or 0)

    async def _catch_up(self, subject: str, first: int, last: int | None) -> None:
        """Deliver the stored events on `subject` from sequence `first` through `last`."""
        sequence = first
        while last is None or sequence <= last:
            try:
                raw = await self._get_stored(subject, sequence, after=True)
            except NotFoundError as exc:
                self._check_stream(exc)
                return
            except NatsError as exc:
                raise self._read_error(exc) from exc
            found = int(raw.seq or 0)
            if found == 0 or (last is not None and found > last):
                return
            sequence = found + 1
            thread_id = self._subjects.thread_id_of(str(raw.subject))
            if found <= self._seen.get(thread_id, self._floor):
                continue
            self._seen[thread_id] = found
            kind = (raw.headers or {}).get(HEADER_KIND)
            self._deliver(thread_id, raw.data or b"", kind, found)

    def _check_stream(self, exc: NotFoundError) -> None:
        if exc.err_code == _STREAM_NOT_FOUND:
            raise BusError(
                f"stream {self._subjects.events_stream} does not exist: start `ore serve` "
                f"(prefix {self._subjects.prefix!r}) before the conduit"
            ) from exc

    def _read_error(self, exc: Exception) -> BusError:
        return BusError(
            f"cannot read stored events from stream {self._subjects.events_stream}: {exc}. "
            "Is `ore serve` running, and may this user read it ($JS.API.STREAM.MSG.GET)?"
        )

    async def _fetch(self, pull: JetStreamContext.PullSubscription) -> None:
        """Keep up to `prefetch` stored events ready; permits return as events are acked."""
        try:
            while not self._closed:
                await self._permits.acquire()
                batch = 1
                while batch < self._prefetch and not self._permits.locked():
                    await self._permits.acquire()
                    batch += 1
                try:
                    messages = await pull.fetch(batch, timeout=_FETCH_WAIT)
                except NatsTimeoutError:
                    messages = []
                except (NatsError, OreError) as exc:
                    # Disconnected or the consumer is gone: try again shortly.
                    log.warning(
                        "fetching stored events failed", durable=self.durable, error=str(exc)
                    )
                    messages = []
                    await asyncio.sleep(_RETRY_PAUSE)
                for msg in messages:
                    self._queue.put_nowait(("stored", msg))
                for _ in range(batch - len(messages)):
                    self._permits.release()
        finally:
            if not self._nc.is_closed:
                try:
                    await pull.unsubscribe()
                except NatsError as exc:
                    log.debug("unsubscribe failed", error=str(exc))
