"""One terminal conversation with the core: the current thread and one turn at a time.

Every message is sent with a fresh W3C `traceparent` in its context. The core copies
the context onto every output event the message causes, so the `lifecycle` `done`
that ends *this* turn is recognised exactly: a late `done` of an earlier interrupt, or
of another terminal chatting on the same thread, never ends it early.

On a thread linked to other endpoints (bridging, `ore chat --attach`), their messages
are shown as notices with the sender's label (`Ana (slack): hi`) as the feed brings
them, during a turn and, through `watch`, while the prompt waits for input too.
"""

from __future__ import annotations

import asyncio
import functools
import secrets
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Protocol

import structlog

from ore_conduit_stdin.files import received_file
from ore_core import (
    ErrorEvent,
    EventContext,
    LifecycleEvent,
    NoticeEvent,
    OutputEvent,
    PropertiesEvent,
    Role,
    SessionSwitchEvent,
    Severity,
    TurnCompleteEvent,
    UserMessageEvent,
)
from ore_core.artifacts import Attachment
from ore_core.conduit import (
    ApiError,
    BusError,
    ConduitClient,
    Delivery,
    EventFeed,
    SettingsCache,
    classify,
)

__all__ = ["ChatSession", "TurnResult", "View", "new_traceparent"]

log = structlog.get_logger("ore.conduit.stdin")


def new_traceparent() -> str:
    """A W3C trace context with a fresh trace id: one per message sent."""
    return f"00-{secrets.token_hex(16)}-{secrets.token_hex(8)}-01"


class View(Protocol):
    """Where a turn's output goes: a terminal UI or plain text."""

    def begin(self) -> None:
        """The message was sent; nothing came back yet."""

    def show(self, event: OutputEvent) -> None:
        """One output event of the turn (never the user's own message echoed back)."""

    def end(self) -> None:
        """The turn is over (done, failed or cancelled)."""


class IdleView(View, Protocol):
    """A view that also shows another endpoint's whole answer while no turn runs."""

    def answer(self, text: str) -> None:
        """The finished text of an answer to another endpoint's message."""


@dataclass
class TurnResult:
    """How a turn ended: the error it reported, whether it was cancelled, a thread switch.

    `recorded` is True once the core stored the message as a turn; a message that an
    interceptor dropped (a guard, a slash command) never is. `notices` are the
    severities of the notices the message caused.
    """

    error: str | None = None
    cancelled: bool = False
    switched_to: str | None = None
    recorded: bool = False
    notices: list[Severity] = field(default_factory=list)

    @property
    def dropped(self) -> bool:
        """An interceptor refused the message: not stored, and nothing but a warning or
        an error to show for it (a slash command answers with an Info notice)."""
        if self.recorded or self.switched_to is not None or self.error is not None:
            return False
        return not self.notices or max(self.notices) >= Severity.WARN


class ChatSession:
    """Sends the user's lines to the current thread and feeds the replies to a view.

    Use it as an async context manager (it opens the thread's event feed before the
    first message, so no reply can be missed). `interrupt()` may be called from a
    signal handler while `turn()` runs. A `session_switch` (what `/new` answers) moves
    the session to the new thread once the turn is over.
    """

    def __init__(
        self,
        client: ConduitClient,
        thread_id: str,
        *,
        user: str = "",
        files_dir: Path | None = None,
    ) -> None:
        self.files_dir = files_dir
        """Where files other endpoints send are saved (None: only named)."""
        self._client = client
        self._thread_id = thread_id
        self._user = user
        self._feed: EventFeed | None = None
        self._interrupts: set[asyncio.Task[None]] = set()
        self._running = False
        self._interrupted = False
        self._settings = SettingsCache()
        # The feed's next delivery being read: shared by `turn` and `watch`, so the
        # prompt's watcher can stop waiting without losing what the read brings.
        self._reading: asyncio.Future[Delivery | None] | None = None

    @property
    def thread_id(self) -> str:
        """The thread the next message goes to."""
        return self._thread_id

    async def __aenter__(self) -> ChatSession:
        await self._open_feed()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the event feed and wait for interrupts still being sent."""
        if self._interrupts:
            await asyncio.wait(self._interrupts)
        self._stop_reading()
        feed, self._feed = self._feed, None
        if feed is not None:
            await feed.close()

    def _stop_reading(self) -> None:
        reading, self._reading = self._reading, None
        if reading is not None:
            reading.cancel()

    async def _next(self) -> Delivery | None:
        """The feed's next delivery (None: it ended). A caller cancelled while waiting
        leaves the read running: the next call gets what it brings."""
        if self._reading is None:
            assert self._feed is not None
            self._reading = asyncio.ensure_future(_read_one(self._feed))
        reading = self._reading
        try:
            return await asyncio.shield(reading)
        finally:
            if reading.done() and self._reading is reading:
                self._reading = None

    async def watch(
        self, view: IdleView, show: Callable[[Callable[[], None]], Awaitable[None]]
    ) -> None:
        """While no turn runs: other endpoints' messages and answers as they come, each
        passed to `show` (which runs it where printing leaves the prompt intact)."""
        name = self._client.namespace
        while (delivery := await self._next()) is not None:
            provenance = delivery.event.context.provenance
            if provenance == name and not isinstance(delivery.event, PropertiesEvent):
                continue  # our own, late (an interrupt's done): nothing to show now
            if provenance or isinstance(delivery.event, PropertiesEvent):
                files = await self._received_files(delivery)
                await show(functools.partial(self._relay, delivery, view, view.answer, files))

    async def _open_feed(self) -> None:
        feed = self._client.events(self._thread_id)
        await feed.start()
        self._feed = feed
        try:
            info = await self._client.get_thread(self._thread_id)
        except ApiError as exc:
            if exc.status != 404:  # 404: created by the first message, never linked yet
                raise
        else:
            self._settings.load(self._thread_id, info.metadata)

    @property
    def client(self) -> ConduitClient:
        """The conduit's connection (uploads go through it)."""
        return self._client

    async def turn(
        self, text: str, view: View, attachments: tuple[Attachment, ...] = ()
    ) -> TurnResult:
        """Send `text` (and `attachments`) and show what it causes until the core reports
        it handled."""
        if self._feed is None:
            raise BusError("the chat session is not open: use `async with ChatSession(...)`")
        name = self._client.namespace
        trace = new_traceparent()
        message = UserMessageEvent(
            id=f"{name}-{secrets.token_hex(16)}",
            content=text,
            attachments=attachments,
            context=EventContext(
                provenance=name, user=self._user, user_name=self._user, traceparent=trace
            ),
        )
        result = TurnResult()
        self._running = True
        self._interrupted = False
        view.begin()
        try:
            await self._client.send(self._thread_id, message)
            while (delivery := await self._next()) is not None:
                event = delivery.event
                context = event.context
                ours = context.provenance == name and context.traceparent == trace
                if ours and isinstance(event, LifecycleEvent) and event.phase == "done":
                    break
                if self._interrupt_ended_turn(event, context):
                    break  # the message was dropped before it started: no `done` of its own
                if ours or not context.provenance:
                    self._observe(event, result, view)
                elif context.provenance != name or isinstance(event, PropertiesEvent):
                    self._relay(delivery, view, None, await self._received_files(delivery))
            else:
                raise BusError(f"the event feed of thread {self._thread_id} closed mid-turn")
        finally:
            self._running = False
            view.end()
        if result.switched_to is not None and result.switched_to != self._thread_id:
            await self._follow(result.switched_to)
        return result

    def _interrupt_ended_turn(self, event: OutputEvent, context: EventContext) -> bool:
        # An interrupt is sent without a traceparent; its own `done` comes after the
        # message's, so it only ends the turn when the message never produced one.
        return (
            self._interrupted
            and isinstance(event, LifecycleEvent)
            and event.phase == "done"
            and context.provenance == self._client.namespace
            and not context.traceparent
        )

    async def _received_files(self, delivery: Delivery) -> list[NoticeEvent]:
        """A line for each file of another endpoint's message, saved to `files_dir`."""
        event = delivery.event
        if not isinstance(event, TurnCompleteEvent) or event.turn.role != Role.USER:
            return []
        return [
            await received_file(self._client, delivery.thread_id, file, self.files_dir)
            for file in event.turn.artifacts
            if isinstance(file, Attachment)
        ]

    def _relay(
        self,
        delivery: Delivery,
        view: View,
        answer: Callable[[str], None] | None = None,
        files: Sequence[NoticeEvent] = (),
    ) -> None:
        """Another endpoint's event on a linked thread: its messages with their label
        (and a line per file, `files`); with `answer` (no turn shown), its answers as
        whole texts once finished."""
        event = delivery.event
        if isinstance(event, PropertiesEvent):
            self._settings.update(delivery.thread_id, event)
            return
        relayed = classify(delivery, self._client.namespace, self._settings.get(self._thread_id))
        if relayed.action in ("relayed", "edited"):
            edited = " (edited)" if relayed.action == "edited" else ""
            view.show(NoticeEvent(content=relayed.shown + edited, severity=Severity.INFO))
            for line in files:
                view.show(line)
        elif relayed.action in ("deleted", "delivery"):
            text = relayed.text or f"a message from {relayed.origin} was deleted"
            view.show(NoticeEvent(content=text, severity=Severity.WARN))
        elif relayed.action == "answer" and relayed.origin != "app":
            if answer is None:
                view.show(event)  # the gateway answers all: another endpoint's answer
            elif relayed.turn_id and relayed.text:
                answer(relayed.text)

    def _observe(self, event: OutputEvent, result: TurnResult, view: View) -> None:
        if isinstance(event, TurnCompleteEvent) and event.turn.role == Role.USER:
            result.recorded = True
            return  # the terminal shows what the user typed already
        if isinstance(event, NoticeEvent):
            result.notices.append(event.severity)
        if isinstance(event, SessionSwitchEvent):
            result.switched_to = event.session_id
            return
        if isinstance(event, ErrorEvent):
            result.error = event.message
        elif isinstance(event, LifecycleEvent) and event.phase == "cancelled":
            result.cancelled = True
        view.show(event)

    async def _follow(self, thread_id: str) -> None:
        """Move to `thread_id`: its feed opens before the old one closes."""
        old = self._feed
        self._stop_reading()  # a read of the old feed
        self._thread_id = thread_id
        await self._open_feed()
        if old is not None:
            await old.close()

    def interrupt(self) -> None:
        """Ask the core to cancel the running turn (no-op when idle); returns at once."""
        if not self._running:
            return
        self._interrupted = True
        task = asyncio.get_running_loop().create_task(self._send_interrupt(self._thread_id))
        self._interrupts.add(task)
        task.add_done_callback(self._interrupts.discard)

    async def _send_interrupt(self, thread_id: str) -> None:
        try:
            await self._client.interrupt(thread_id)
        except BusError as exc:
            log.warning("interrupt not sent", thread_id=thread_id, error=str(exc))


async def _read_one(feed: EventFeed) -> Delivery | None:
    """The next delivery of `feed`, None once it ended."""
    try:
        return await anext(feed)
    except StopAsyncIteration:
        return None
