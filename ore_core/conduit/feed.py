"""EventFeed: a conduit's ordered stream of output events, without gaps.

Live (`durable=None`): subscribes `P.out.NS.T` (or `P.out.NS.*`). Stored events carry
`Nats-Sequence` and `Nats-Last-Sequence` (the previous sequence of the same thread);
when the previous one is not the last one this feed saw, the missing events are read
through the control API (`P.api.NS.events.read`, which the core answers from
`ORE_EVENTS`) and delivered first, so stored events of a thread always arrive in
order and complete. After a reconnect the feed reads what was stored meanwhile the
same way. Deltas are delivered as they come (best effort). A conduit therefore needs
no JetStream API access: NATS permissions can keep it to its own namespace.

Durable (`durable=NAME`): the core keeps the feed's position (`cursors.get`/`set`, a
KV bucket only the core touches), so a conduit that was stopped receives everything
stored meanwhile when it starts again: it starts from its cursor (waiting for the core
if it is away), catches up, then follows live events. An event counts as done when the
reader asks for the next one (or leaves the `async with` block without an error), and
the cursor moves then, so an event being handled when the process dies is delivered
again: handle events idempotently. A reader that hands events on to other tasks (one
per platform thread, say) holds each (`feed.hold(delivery)`) and releases the hold once
that task finished it: the cursor never passes an event still held.
"""

from __future__ import annotations

import asyncio
import re
from collections import deque
from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import Annotated, Any, Literal

import structlog
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.errors import Error as NatsError
from pydantic import AfterValidator

from ore_core import jsonutil, tracing
from ore_core._nats.connection import (
    PermissionWatch,
    subscribe_inline,
    subscriptions_registered,
)
from ore_core.conduit.counters import metrics
from ore_core.conduit.waiting import until_answered
from ore_core.errors import ApiError, BusError, PermissionDenied
from ore_core.events import BATCH_KIND, OutputEvent, decode_output_value
from ore_core.ids import is_valid_thread_id, validate_thread_id
from ore_core.subjects import HEADER_KIND, HEADER_LAST_SEQUENCE, Subjects

__all__ = ["DURABLE_NAME", "Delivery", "DurableName", "EventFeed", "Hold", "durable_consumer_name"]

HEADER_SEQUENCE = "Nats-Sequence"  # set by RePublish: this event's ORE_EVENTS sequence
DURABLE_NAME = re.compile(r"[A-Za-z0-9-]{1,64}")
"""Durable names: no `_`, so `<name>_<thread>` cursor names never collide."""


def _check_durable_name(name: str) -> str:
    if not DURABLE_NAME.fullmatch(name):
        raise ValueError("must be 1-64 letters, digits and - (no _ or .)")
    return name


DurableName = Annotated[str, AfterValidator(_check_durable_name)]
"""A conduit setting naming its durable feed (`DURABLE_NAME`), checked when it loads."""

log = structlog.get_logger("ore.bus.feed")

_PAGE = 200  # events per events.read request while catching up

Call = Callable[[str, Mapping[str, Any]], Awaitable[dict[str, Any]]]
"""Calls a control-API method of the feed's namespace: (method, body) -> reply."""


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
    """The cursor name behind `events(thread_id, durable=durable)`.

    `durable` alone for all threads, `<durable>_<thread>` for one thread.
    """
    if DURABLE_NAME.fullmatch(durable) is None:
        raise ValueError(
            f"invalid durable name {durable!r}: use 1-64 characters from A-Z, a-z, 0-9 and '-'"
        )
    return durable if thread_id is None else f"{durable}_{validate_thread_id(thread_id)}"


_Item = tuple[Literal["live"], Msg] | tuple[Literal["resync", "refused", "end"], None]
"""Work the reader does itself, in order: a live message that needs a catch-up first
(and every one after it), a resync, a refused subscription, the end."""


class Hold:
    """A delivery of a durable feed that another task is still finishing (`EventFeed.hold`).

    The feed's cursor stays before the delivery's stored batch until `release()` (idempotent),
    so a process that dies before the task finished gets the batch again. Holds of live-only
    events and of live feeds do nothing.
    """

    __slots__ = ("_feed", "_sequence")

    def __init__(self, feed: EventFeed | None, sequence: int) -> None:
        self._feed = feed
        self._sequence = sequence

    def release(self) -> None:
        """The delivery is finished: the cursor may move past it."""
        feed, self._feed = self._feed, None
        if feed is not None:
            feed._release(self._sequence)


_NO_HOLD = Hold(None, 0)


class EventFeed:
    """Output events of one thread (or of all threads of the namespace) as `Delivery`s.

    Use `async with client.events(...) as feed:` and then `async for delivery in
    feed:`; entering subscribes, so publish after it and nothing is missed. A feed is
    consumed by one task. `kinds` keeps only events of those kinds.
    """

    def __init__(
        self,
        nc: NatsClient,
        subjects: Subjects,
        namespace: str,
        call: Call,
        *,
        thread_id: str | None = None,
        kinds: Collection[str] | None = None,
        durable: str | None = None,
        permissions: PermissionWatch | None = None,
        on_close: Callable[[EventFeed], object] | None = None,
    ) -> None:
        self.thread_id = None if thread_id is None else validate_thread_id(thread_id)
        self.namespace = namespace
        self.kinds = frozenset(kinds or ())
        self.durable = durable
        self._cursor = None if durable is None else durable_consumer_name(durable, thread_id)
        self._nc = nc
        self._call = call
        self._subjects = subjects
        self._permissions = permissions or PermissionWatch()
        self._on_close = on_close
        self._backlog: deque[_Item] = deque()
        self._busy = False  # the reader works on an item of the backlog
        self._waiter: asyncio.Future[None] | None = None  # the reader waits for work
        self._ready: deque[Delivery] = deque()
        self._thread_at = len(subjects.output_wildcard_of(namespace)) - 1
        self._seen: dict[str, int] = {}  # thread -> last stored sequence delivered
        self._floor = 0  # last stored sequence before this feed started (or its cursor)
        self._live: Subscription | None = None
        self._unwatch: Callable[[], None] | None = None
        self._refusal: PermissionDenied | None = None
        self._delivered = 0  # durable: sequence of the last stored event handed out
        self._finished = 0  # durable: ... of the last one the reader finished
        self._saved = 0  # durable: the cursor as the core has it
        self._held: dict[int, int] = {}  # durable: sequence -> deliveries held (`hold`)
        self._saving: asyncio.Task[None] | None = None  # moves the cursor after a release
        self._save_again = False
        self._cursor_lock = asyncio.Lock()  # cursor saves in order: never moved back
        self._started = False
        self._closed = False

    # -- lifetime -------------------------------------------------------------

    async def start(self) -> EventFeed:
        """Subscribe (and read the durable cursor). Idempotent; `async with` calls it."""
        if self._started:
            return self
        self._started = True
        metrics.watch(self)
        try:
            # Read the floor before subscribing: an event stored in between shows up
            # as a gap at the next event and is caught up, never skipped.
            if self._cursor is not None:
                self._floor = self._saved = await self._load_cursor(self._cursor)
            else:
                self._floor = await self._last_sequence()
            output = (
                self._subjects.output_wildcard_of(self.namespace)
                if self.thread_id is None
                else self._subjects.output(self.namespace, self.thread_id)
            )
            self._unwatch = self._permissions.watch_subscription(output, self._on_refused)
            self._live = await subscribe_inline(self._nc, output, self._on_live)
            await subscriptions_registered(self._nc)
            if self._refusal is not None:
                raise self._refusal
            if self._cursor is not None:
                self._post(("resync", None))  # what was stored while stopped
        except BaseException:
            await self.close()
            raise
        return self

    async def close(self) -> None:
        """Unsubscribe. Idempotent.

        A durable feed's cursor stays at the last event the reader finished: the event
        read last counts as unfinished unless the `async with` block ended cleanly.
        """
        if self._closed:
            return
        self._closed = True
        if self._saving is not None:
            self._saving.cancel()
        if self._unwatch is not None:
            self._unwatch()
        live, self._live = self._live, None
        if live is not None and not self._nc.is_closed:
            try:
                await live.unsubscribe()
            except NatsError as exc:
                log.debug("unsubscribe failed", error=str(exc))
        self._post(("end", None))
        if self._on_close is not None:
            self._on_close(self)

    async def __aenter__(self) -> EventFeed:
        return await self.start()

    async def __aexit__(self, exc_type: type[BaseException] | None, *rest: object) -> None:
        if exc_type is None:
            self._finished = self._delivered
            await self._ack_pending()
        await self.close()  # a batch not read to its end is read again next time

    def resync(self) -> None:
        """Catch up on stored events after a reconnect (called by the client)."""
        if not self._closed:
            self._post(("resync", None))

    @property
    def depth(self) -> int:
        """Events received for the reader and not finished: queued for it, or held by
        its tasks (the conduit's outbox; messages waiting behind a catch-up are not
        counted until it is done)."""
        return len(self._ready) + sum(self._held.values())

    # -- reading --------------------------------------------------------------

    def __aiter__(self) -> EventFeed:
        return self

    async def __anext__(self) -> Delivery:
        if self._cursor is None and self._ready:
            return self._ready.popleft()  # a live feed keeps no position
        if not self._started:
            await self.start()
        if self._cursor is not None:
            self._finished = self._delivered  # asking for more: the reader is done with it
            await self._ack_pending()
        ready = self._ready
        backlog = self._backlog
        while not ready:
            if not backlog:
                await self._wait_for_work()
                continue
            source, msg = backlog[0]
            if source == "end":
                raise StopAsyncIteration  # left in the backlog: later calls end too
            backlog.popleft()
            if source == "refused" and self._refusal is not None:
                raise self._refusal
            self._busy = True
            try:
                if source == "resync":
                    await self._catch_up(self.thread_id, self._high_water(), None)
                elif source == "live" and msg is not None:
                    await self._accept_live(msg)
            finally:
                self._busy = False
        delivery = ready.popleft()
        sequence = delivery.sequence
        if sequence is not None and not (ready and ready[0].sequence == sequence):
            # A stored batch is done with only once all of its events were read (they
            # are queued together): moving the cursor earlier could lose the rest.
            self._delivered = max(self._delivered, sequence)
        return delivery

    def hold(self, delivery: Delivery) -> Hold:
        """Keep the cursor before `delivery`'s stored batch until the hold is released.

        For a reader that hands deliveries to other tasks: asking for the next delivery
        no longer means this one is finished. Release the hold once it is (also when
        handling it failed for good), or the cursor stays behind it until a restart
        delivers it again.
        """
        sequence = delivery.sequence
        if self._cursor is None or sequence is None:
            return _NO_HOLD
        self._held[sequence] = self._held.get(sequence, 0) + 1
        return Hold(self, sequence)

    def _release(self, sequence: int) -> None:
        left = self._held.get(sequence, 0) - 1
        if left > 0:
            self._held[sequence] = left
        else:
            self._held.pop(sequence, None)
        if self._closed:
            return
        if self._saving is not None and not self._saving.done():
            self._save_again = True
        else:
            self._saving = asyncio.get_running_loop().create_task(self._save_released())

    async def _save_released(self) -> None:
        """Move the cursor after releases (one save at a time, again while more came)."""
        while True:
            self._save_again = False
            await self._ack_pending()
            if not self._save_again or self._closed:
                return

    async def _ack_pending(self) -> None:
        """Durable: move the cursor to the last batch the reader finished and no one holds."""
        if self._cursor is None or self._closed:
            return
        async with self._cursor_lock:
            sequence = self._finished
            if self._held:
                sequence = min(sequence, min(self._held) - 1)
            if sequence <= self._saved or self._closed:
                return
            try:
                await self._call("cursors.set", {"name": self._cursor, "sequence": sequence})
            except (BusError, ApiError) as exc:  # delivered again after a restart: idempotent
                log.warning("durable cursor not saved", durable=self.durable, error=str(exc))
                return
            self._saved = sequence

    async def _wait_for_work(self) -> None:
        waiter = self._waiter = asyncio.get_running_loop().create_future()
        try:
            await waiter
        finally:
            self._waiter = None

    def _post(self, item: _Item) -> None:
        """Hand the reader work of its own (it may await: a catch-up)."""
        self._backlog.append(item)
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _on_live(self, msg: Msg) -> None:
        """A message on the output subject, as the connection's read loop parses it.

        Queued for the reader as its events at once, unless it needs a catch-up first
        or the reader has earlier work: then it waits its turn in the backlog. One
        parse, no task hop before the reader's, which wakes once per message at most.
        """
        if self._closed:
            return
        if self._backlog or self._busy or not self._take_live(msg, after_catch_up=False):
            self._backlog.append(("live", msg))
        self._wake()

    def _on_refused(self, error: PermissionDenied) -> None:
        # The server may refuse the subscription after start() returned: tell the reader.
        self._refusal = error
        self._post(("refused", None))

    def _take_live(self, msg: Msg, *, after_catch_up: bool) -> bool:
        """Queue a live message's events; False (and nothing done) if it follows a gap.

        Stored batches carry their sequence and the previous one of their thread: a
        previous one this feed has not seen means batches were missed, which only a
        catch-up through the core can fill (`after_catch_up`: it was done, deliver).
        """
        headers = msg.headers or {}
        thread_id = msg.subject[self._thread_at :]
        seen_by_thread = self._seen
        # A thread this feed delivered a stored batch of was checked then.
        if thread_id not in seen_by_thread and not is_valid_thread_id(thread_id):
            log.warning("output on a subject without a thread id skipped", subject=msg.subject)
            return True
        sequence_text = headers.get(HEADER_SEQUENCE)
        if sequence_text is None:  # a delta, published straight to P.out: never stored
            self._deliver(thread_id, msg.data, headers.get(HEADER_KIND), None)
            return True
        sequence = int(sequence_text)
        seen = seen_by_thread.get(thread_id, self._floor)
        if sequence <= seen:
            return True  # already delivered by a catch-up
        if not after_catch_up and int(headers.get(HEADER_LAST_SEQUENCE, "0")) > seen:
            return False
        seen_by_thread[thread_id] = sequence
        if tracing.tracer is not None:
            tracing.delivered(headers, thread_id, sequence)
        self._deliver(thread_id, msg.data, headers.get(HEADER_KIND), sequence)
        return True

    async def _accept_live(self, msg: Msg) -> None:
        """The reader's `_take_live`, catching up first when the message follows a gap."""
        if self._take_live(msg, after_catch_up=False):
            return
        thread_id = msg.subject[self._thread_at :]
        seen = self._seen.get(thread_id, self._floor)
        previous = int((msg.headers or {}).get(HEADER_LAST_SEQUENCE, "0"))
        log.info("gap in output, catching up", thread_id=thread_id, after=seen, to=previous)
        await self._catch_up(thread_id, seen, previous)
        self._take_live(msg, after_catch_up=True)

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
        return self._deliver_value(thread_id, value, None, sequence)

    def _deliver_value(
        self, thread_id: str, value: Any, kind: str | None, sequence: int | None
    ) -> bool:
        """`_deliver` of a message already parsed (catch-up replies hold parsed events)."""
        kinds = self.kinds
        if kinds and kind is not None and kind != BATCH_KIND and kind not in kinds:
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
        append = self._ready.append
        kept = False
        for item in items:
            item_kind = item.get("kind") if isinstance(item, dict) else None
            if not isinstance(item_kind, str) or not item_kind:
                log.warning("output event without a kind skipped", thread_id=thread_id)
                continue
            if not kinds or item_kind in kinds:
                append(Delivery.of_value(thread_id, item_kind, item, sequence))
                kept = True
        return kept

    # -- stored events (through the core) -------------------------------------

    def _high_water(self) -> int:
        return max(self._floor, *self._seen.values()) if self._seen else self._floor

    async def _read(self, body: Mapping[str, Any]) -> dict[str, Any]:
        try:
            return await self._call("events.read", body)
        except PermissionDenied:
            raise
        except (BusError, ApiError) as exc:
            raise self._unreadable(exc) from exc

    def _unreadable(self, exc: Exception) -> BusError:
        return BusError(
            f"cannot read stored events of namespace {self.namespace} through "
            f"{self._subjects.prefix}.api.{self.namespace}.events.read: {exc}. "
            "Is `ore serve` running?"
        )

    async def _read_when_up(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """`events.read` for a catch-up, waiting while the core is away.

        Catch-ups run inside the reader's loop (after a reconnect, at a durable start,
        on a gap), often while the core restarts: the read goes through the core, so
        nothing answering then is normal, not fatal. Wait for it (backing off, told
        once in the log) instead of ending the feed, and so the conduit; a refusal or
        an error reply still ends it, and closing the feed stops the wait.
        """
        try:
            return await self._call_when_up("events.read", body, "catch-up")
        except ApiError as exc:
            raise self._unreadable(exc) from exc
        except BusError as exc:
            if isinstance(exc, PermissionDenied):
                raise
            raise self._unreadable(exc) from exc

    async def _call_when_up(
        self, method: str, body: Mapping[str, Any], purpose: str
    ) -> dict[str, Any]:
        """`method` through the core, waiting while nothing answers (see `_read_when_up`);
        BusError only once the feed is closed."""
        return await until_answered(
            lambda: self._call(method, body),
            f"core unreachable, {purpose}",
            stopped=lambda: self._closed,
        )

    async def _last_sequence(self) -> int:
        body: dict[str, Any] = {"limit": 0}
        if self.thread_id is not None:
            body["thread"] = self.thread_id
        return int((await self._read(body)).get("last") or 0)

    async def _load_cursor(self, name: str) -> int:
        """The durable's position, waiting while the core is away: a conduit started
        before the core (a host booting, a deploy restarting both) waits for it."""
        purpose = f"durable feed {name}"
        try:
            reply = await self._call_when_up("cursors.get", {"name": name}, purpose)
            if reply.get("sequence") is not None:
                return int(reply["sequence"])
            # A new durable starts now: a conduit deployed today must not replay last
            # month's replies. Restarts continue from the last finished event.
            body: dict[str, Any] = {"limit": 0}
            if self.thread_id is not None:
                body["thread"] = self.thread_id
            last = await self._call_when_up("events.read", body, purpose)
            sequence = int(last.get("last") or 0)
            await self._call_when_up("cursors.set", {"name": name, "sequence": sequence}, purpose)
        except PermissionDenied:
            raise
        except (BusError, ApiError) as exc:
            raise BusError(f"cannot read the position of durable feed {name}: {exc}") from exc
        return sequence

    async def _catch_up(self, thread_id: str | None, after: int, last: int | None) -> None:
        """Deliver the stored events of the thread (or namespace) after `after` to `last`."""
        while True:
            body: dict[str, Any] = {"after": after, "limit": _PAGE}
            if thread_id is not None:
                body["thread"] = thread_id
            reply = await self._read_when_up(body)
            for entry in reply.get("events", ()):
                found = int(entry["sequence"])
                if last is not None and found > last:
                    return
                after = found
                thread = str(entry["thread"])
                if found <= self._seen.get(thread, self._floor):
                    continue
                self._seen[thread] = found
                self._deliver_value(thread, entry["event"], entry.get("kind") or None, found)
            following = reply.get("next")
            if following is None:
                return
            after = int(following)
