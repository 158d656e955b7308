"""What the pages of a thread see live: one feed for the namespace, fanned out per thread.

`LiveHub.run` reads every output event of the web namespace once and hands each to the
open event streams of its thread as a `Frame`. Stored events get the id `S.i` (the
ORE_EVENTS sequence of their batch, and their place in it), so a reconnect with
`Last-Event-ID` resumes exactly where it stopped: `catch_up` reads what the store has
after that position. Deltas are live only; the hub also adds them up per thread (the
answer being written, and the user messages sent but not yet stored), so a page that
comes back in the middle of an answer is shown all of it so far, then the rest.

On a thread linked to other endpoints (bridging, `ore_conduit_web.relays`) stored
events carry a `relay` view (sender, origin, label, action), and the deltas of an answer
the gateway's `answer` setting hides are not sent. A relayed copy is delivered once it
is in the thread's stored events (every page reads them): the hub counts it and
reports it to the core (`deliveries.report`, the event id as the platform id).

Concurrency: everything runs on the conduit's event loop; a slow page has a bounded
queue and is cut off when it overflows (its browser reconnects and catches up).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import structlog

from ore_conduit_web.relays import Relays, annotate, stored_delivery, with_relay
from ore_core import (
    ArtifactEvent,
    EventDecodeError,
    LifecycleEvent,
    NoticeEvent,
    OreError,
    Role,
    TurnCompleteEvent,
)
from ore_core.artifacts import ReasoningDelta, TextDelta
from ore_core.conduit import ConduitClient, Delivery, Relayed, metrics
from ore_core.events import BATCH_KIND, encode_event

__all__ = [
    "Frame",
    "LiveHub",
    "Position",
    "Subscription",
    "catch_up",
    "event_stream",
    "parse_position",
]

log = structlog.get_logger("ore.web.live")

_QUEUE = 2000  # frames a page may lag behind before it is cut off
_KEEPALIVE = 15.0  # seconds of silence before a comment line keeps proxies from closing
_PING = b": ping\n\n"
_PAGE = 500  # events per events.read request
_ENDS = ("done", "cancelled")
_COPIES = ("relayed", "edited")  # another endpoint's message, delivered to the pages


@dataclass(frozen=True, order=True, slots=True)
class Position:
    """Where a stored event is: its batch's sequence and its index in the batch."""

    sequence: int
    index: int

    def __str__(self) -> str:
        return f"{self.sequence}.{self.index}"


def parse_position(text: str | None) -> Position | None:
    """`S.i` (or a bare `S`: after the whole batch S) as a Position; None if absent.

    ValueError for anything else.
    """
    if text is None or text == "":
        return None
    sequence, dot, index = text.partition(".")
    if not sequence.isdigit() or (dot and not index.isdigit()) or len(text) > 40:
        raise ValueError(f"event id {text[:40]!r} is not SEQUENCE.INDEX")
    return Position(int(sequence), int(index) if dot else 1 << 30)


@dataclass(slots=True)
class Frame:
    """One server-sent event: `event` name, JSON `data`, and for stored events the id.

    Its bytes are made once (`wire`) however many pages it goes to.
    """

    event: str
    data: str  # one line: JSON escapes newlines
    position: Position | None = None
    ends_turn: bool = False
    _wire: bytes | None = field(default=None, repr=False, compare=False)

    def wire(self) -> bytes:
        """The frame as `text/event-stream` bytes."""
        if self._wire is None:
            head = f"event: {self.event}\n"
            if self.position is not None:
                head += f"id: {self.position}\n"
            self._wire = f"{head}data: {self.data}\n\n".encode()
        return self._wire


@dataclass(slots=True)
class _Partial:
    """A thread's answer in progress and its user messages not stored yet."""

    text: str = ""
    reasoning: str = ""
    running: bool = False
    pending: dict[str, str] = field(default_factory=dict)  # event id -> text
    stored_message: bool = False  # a user turn was stored since the last `done`

    def value(self) -> dict[str, Any]:
        return {
            "running": self.running,
            "text": self.text,
            "reasoning": self.reasoning,
            "pending": [{"event_id": k, "text": v} for k, v in self.pending.items()],
        }


@dataclass(slots=True, eq=False)
class Subscription:
    """An open event stream of one page: the snapshot when it opened, then its queue."""

    thread_id: str
    snapshot: Frame
    base: int  # the last stored sequence the hub had seen when the snapshot was taken
    queue: asyncio.Queue[Frame | None] = field(
        default_factory=lambda: asyncio.Queue(maxsize=_QUEUE)
    )
    cut: bool = False


class LiveHub:
    """The namespace's output, fanned out to the pages of each thread."""

    def __init__(self, client: ConduitClient) -> None:
        self._client = client
        self._subscriptions: dict[str, set[Subscription]] = {}
        self._partials: dict[str, _Partial] = {}
        self._last: dict[str, Position] = {}  # thread -> last stored position seen
        self.relays = Relays(client)
        self.ready = asyncio.Event()

    async def run(self) -> None:
        """Read the namespace's output until cancelled."""
        async with asyncio.TaskGroup() as reports, self._client.events() as feed:
            self.ready.set()
            async for delivery in feed:
                await self.relays.settings(delivery.thread_id)
                try:
                    copy = self._dispatch(delivery)
                except EventDecodeError:  # the core never sends one: nothing to show
                    metrics.delivery_failed(self._client.namespace)
                    log.warning("an undecodable event was dropped", thread_id=delivery.thread_id)
                    continue
                if copy is not None:
                    reports.create_task(self._report(*copy))

    def subscribe(self, thread_id: str) -> Subscription:
        """Open a page's stream: a snapshot of the answer so far, then every new frame."""
        partial = self._partials.get(thread_id) or _Partial()
        last = self._last.get(thread_id)
        snapshot = Frame("partial", json.dumps(partial.value()))
        sub = Subscription(thread_id, snapshot, last.sequence if last else 0)
        self._subscriptions.setdefault(thread_id, set()).add(sub)
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        """Close a page's stream."""
        subs = self._subscriptions.get(sub.thread_id)
        if subs is not None:
            subs.discard(sub)
            if not subs:
                del self._subscriptions[sub.thread_id]

    def close(self) -> None:
        """End every open stream (shutdown): their pages reconnect to the next server."""
        for subs in self._subscriptions.values():
            for sub in subs:
                sub.cut = True
                while True:
                    try:
                        sub.queue.put_nowait(None)
                        break
                    except asyncio.QueueFull:
                        sub.queue.get_nowait()

    def note_sent(self, thread_id: str, event_id: str, text: str) -> None:
        """A user message went to the core: shown as pending until it is stored."""
        partial = self._partials.setdefault(thread_id, _Partial())
        partial.pending[event_id] = text
        self._publish(thread_id, Frame("pending", json.dumps({"event_id": event_id, "text": text})))

    def notify(self, thread_id: str, what: str) -> None:
        """Tell the thread's pages that something they show changed (`title`, `branch`, `model`)."""
        self._publish(thread_id, Frame("changed", json.dumps({"what": what})))

    async def _report(self, thread_id: str, relayed: Relayed, position: Position) -> None:
        """Tell the core a relayed copy is in the pages' stream (best effort: the pages
        have it either way)."""
        try:
            await self._client.report_delivery(
                thread_id,
                sequence=position.sequence,
                turn=relayed.turn_id,
                status="delivered",
                platform_ids=[str(position)],
            )
        except OreError as exc:  # the core away, or refusing: the pages have the copy
            log.info("a delivery was not reported", thread_id=thread_id, error=str(exc))

    def _dispatch(self, delivery: Delivery) -> tuple[str, Relayed, Position] | None:
        """Hand one event to the thread's pages; a relayed copy it delivered (to report)."""
        thread_id = delivery.thread_id
        event = delivery.event
        sequence = delivery.sequence
        partial = self._partials.get(thread_id)
        own = event.context.provenance == self._client.namespace
        if sequence is None:
            if not own and self.relays.classify(delivery).action == "hidden":
                return None  # an answer to another endpoint the gateway shows there only
            if isinstance(event, NoticeEvent):  # a line for the pages, not an answer
                self._publish(thread_id, Frame("live", encode_event(event).decode()))
                return None
            if partial is None:
                partial = self._partials[thread_id] = _Partial()
            partial.running = True
            artifact = event.artifact if isinstance(event, ArtifactEvent) else None
            if isinstance(artifact, TextDelta):
                partial.text += artifact.content
            elif isinstance(artifact, ReasoningDelta):
                partial.reasoning += artifact.content
            self._publish(thread_id, Frame("live", encode_event(event).decode()))
            return None
        relayed, view = self.relays.annotate(delivery)
        last = self._last.get(thread_id)
        index = last.index + 1 if last is not None and last.sequence == sequence else 0
        position = self._last[thread_id] = Position(sequence, index)
        ends = isinstance(event, LifecycleEvent) and event.phase in _ENDS
        settled = False
        if partial is not None:
            if isinstance(event, TurnCompleteEvent) and event.turn.role == Role.USER:
                partial.pending.pop(event.turn.event_id, None)
                partial.stored_message = True
            if ends:
                partial.text = partial.reasoning = ""
                partial.running = False
            if isinstance(event, LifecycleEvent) and event.phase == "done":
                settled = _settle(partial, own=own)
            if not partial.running and not partial.pending:
                del self._partials[thread_id]
        data = with_relay(encode_event(event).decode(), view)
        self._publish(thread_id, Frame("stored", data, position, ends))
        if settled:  # the pages drop the message they show as pending
            value = partial.value() if partial is not None else _Partial().value()
            self._publish(thread_id, Frame("partial", json.dumps(value)))
        if relayed.action in _COPIES:
            metrics.delivered(self._client.namespace)
            return thread_id, relayed, position
        answer = isinstance(event, TurnCompleteEvent) and event.turn.role == Role.ASSISTANT
        if answer and relayed.action == "answer":
            metrics.delivered(self._client.namespace)
        return None

    def _publish(self, thread_id: str, frame: Frame) -> None:
        for sub in list(self._subscriptions.get(thread_id, ())):
            if sub.cut:
                continue
            try:
                sub.queue.put_nowait(frame)
            except asyncio.QueueFull:
                sub.cut = True  # too slow: its browser reconnects and catches up
                sub.queue.get_nowait()
                sub.queue.put_nowait(None)
                log.info("a page fell behind and was cut off", thread_id=thread_id)


def _settle(partial: _Partial, *, own: bool) -> bool:
    """At a `done`: True when it ended the oldest pending message (`own`: one of the
    conduit's events) without storing it (a command such as `/compact`, which the
    core answers with a notice), which is then no longer pending.

    The core handles a thread's events one at a time, in order, and a message it takes
    stores its user turn before its `done`; a `done` with no user turn stored since
    the last one ended an event that stored none. A regenerate's `done` with a
    message queued behind it drops that message early (it shows again once stored).
    """
    stored, partial.stored_message = partial.stored_message, False
    if not own or stored or not partial.pending:
        return False
    del partial.pending[next(iter(partial.pending))]
    return True


async def catch_up(
    client: ConduitClient, relays: Relays, thread_id: str, after: Position
) -> AsyncIterator[Frame]:
    """The stored events of the thread after `after`, from the store, in order (with
    their `relay` view on a linked thread)."""
    settings = await relays.settings(thread_id)
    cursor = max(after.sequence - 1, 0)
    while True:
        page = await client.read_events(thread_id, after=cursor, limit=_PAGE)
        for entry in page["events"]:
            sequence = int(entry["sequence"])
            value = entry["event"]
            events = value.get("events", []) if value.get("kind") == BATCH_KIND else [value]
            for index, event in enumerate(events):
                position = Position(sequence, index)
                if position <= after:
                    continue
                ends = event.get("kind") == "lifecycle" and event.get("phase") in _ENDS
                data = json.dumps(event)
                try:
                    delivery = stored_delivery(thread_id, event, sequence)
                    _, view = annotate(delivery, relays.namespace, settings)
                except EventDecodeError:
                    view = None  # the core never stores one: sent as it is
                yield Frame("stored", with_relay(data, view), position, ends)
        following = page.get("next")
        if following is None or following <= cursor:
            return
        cursor = int(following)


async def event_stream(
    hub: LiveHub, client: ConduitClient, thread_id: str, after: Position | None
) -> AsyncIterator[bytes]:
    """One page's event stream: the stored events after `after` (from the store), the
    answer so far (unless it ended meanwhile), then everything new, without repeats."""
    sub = hub.subscribe(thread_id)
    try:
        position = after
        ended_since_snapshot = False
        if after is not None:
            async for frame in catch_up(client, hub.relays, thread_id, after):
                if frame.ends_turn and frame.position and frame.position.sequence > sub.base:
                    ended_since_snapshot = True
                position = frame.position or position
                yield frame.wire()
        if not ended_since_snapshot:
            yield sub.snapshot.wire()
        while True:
            try:
                async with asyncio.timeout(_KEEPALIVE):
                    queued = await sub.queue.get()
            except TimeoutError:
                yield _PING
                continue
            if queued is None:
                return
            if queued.position is not None:
                if position is not None and queued.position <= position:
                    continue
                position = queued.position
            yield queued.wire()
    finally:
        hub.unsubscribe(sub)
