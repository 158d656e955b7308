"""Request-reply: the finished answer to one message, sent to its request's inbox.

Every output event the core produces for a message carries that message's context,
and the bridge gives each message its own `traceparent` (a fresh span), so the events
of one message are exactly those carrying its traceparent, however many messages of
the thread are in flight. A message the core skips as a duplicate (a retried id) ends
with no turn of its own: its answer is then the one stored in the thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from enum import Enum

from ore_conduit_nats.wire import Reply
from ore_core import (
    ArtifactEvent,
    ErrorEvent,
    LifecycleEvent,
    NoticeEvent,
    OutputEvent,
    Role,
    Text,
    Turn,
    TurnCompleteEvent,
    UserMessageEvent,
)
from ore_core.conduit import ConduitClient, EventFeed
from ore_core.errors import OreError
from ore_core.tasks import TaskScope

__all__ = ["REPLY_KINDS", "Answer", "Progress", "Requests"]

REPLY_KINDS = frozenset({"turn_complete", "text", "error", "notice", "lifecycle"})
"""The output kinds replies are made of (no deltas: the bridge sends finished texts)."""


class Progress(Enum):
    """What `Answer.add` learnt from an event."""

    MORE = "more"  # keep reading
    DONE = "done"  # the answer is complete
    SKIPPED = "skipped"  # the core skipped the message: look for the stored answer


class Answer:
    """The answer to the message whose events carry `traceparent`."""

    def __init__(self, traceparent: str) -> None:
        self.traceparent = traceparent
        self.texts: list[str] = []
        self.errors: list[str] = []
        self.notices: list[NoticeEvent] = []
        self.cancelled = False
        self._recorded = False

    def add(self, event: OutputEvent) -> Progress:
        """Take one output event of the thread; events of other messages are ignored."""
        if event.context.traceparent != self.traceparent:
            return Progress.MORE
        if isinstance(event, TurnCompleteEvent) and event.turn.role == Role.USER:
            self._recorded = True
        elif isinstance(event, ArtifactEvent) and isinstance(event.artifact, Text):
            self.texts.append(event.artifact.content)
        elif isinstance(event, ErrorEvent):
            self.errors.append(event.message)
        elif isinstance(event, NoticeEvent):
            self.notices.append(event)
        elif isinstance(event, LifecycleEvent) and event.phase == "cancelled":
            self.cancelled = True
        elif isinstance(event, LifecycleEvent) and event.phase == "done":
            if self._recorded or self.errors or self.notices or self.cancelled:
                return Progress.DONE
            return Progress.SKIPPED
        return Progress.MORE

    def adopt(self, turns: Sequence[Turn], event_id: str) -> bool:
        """Take the stored answer to `event_id` from the thread's active path.

        False when that message has no answer there (not recorded, or not answered yet).
        """
        start = next((i for i, t in enumerate(turns) if t.event_id == event_id), None)
        if start is None:
            return False
        answered = False
        for turn in turns[start + 1 :]:
            if turn.role == Role.USER:
                break
            if turn.role == Role.ASSISTANT:
                answered = True
                self.texts += [a.content for a in turn.artifacts if isinstance(a, Text)]
        return answered

    def reply(self, thread_id: str, in_reply_to: str) -> Reply:
        """The answer as one reply: an error, the texts, else the notices."""
        if self.errors:
            return Reply("error", "\n".join(self.errors), thread_id, in_reply_to)
        if self.cancelled:
            return Reply("error", "the reply was interrupted", thread_id, in_reply_to)
        if self.texts or not self.notices:
            return Reply("text", "\n\n".join(self.texts), thread_id, in_reply_to)
        severity = max(notice.severity for notice in self.notices)
        content = "\n".join(notice.content for notice in self.notices)
        return Reply("notice", content, thread_id, in_reply_to, severity.label)


@dataclass(frozen=True, slots=True)
class _Request:
    """A request sent to the core and awaiting its answer: what collecting it needs."""

    thread_id: str
    event: UserMessageEvent
    external: str  # the sender's id (or a fresh one): the answer's `in_reply_to`
    duplicate: bool  # JetStream had it already: no event will come, the thread may have it


class Requests:
    """The requests being answered; `respond(inbox, reply)` publishes an answer."""

    def __init__(
        self,
        client: ConduitClient,
        tasks: TaskScope,
        timeout: float,
        respond: Callable[[str, Reply], Awaitable[None]],
    ) -> None:
        self.client = client
        self.tasks = tasks
        self.timeout = timeout
        self.respond = respond
        self._answers: dict[str, asyncio.Task[Reply]] = {}  # event id -> its answer
        self._feeds: set[EventFeed] = set()  # closed by their task, or at the end

    async def ask(self, thread_id: str, event: UserMessageEvent, external: str, inbox: str) -> None:
        """Send `event` (unless a retry of a request still being answered) and answer
        `inbox` with its answer once it is there."""
        answer = self._answers.get(event.id)
        if answer is None:
            answer = await self._send(thread_id, event, external)
        self.tasks.spawn(self._respond(inbox, answer), name=f"respond-{event.id}", critical=False)

    async def close(self) -> None:
        """Close the feeds of answers whose task was cancelled before it started."""
        for feed in list(self._feeds):
            await feed.close()

    async def _send(
        self, thread_id: str, event: UserMessageEvent, external: str
    ) -> asyncio.Task[Reply]:
        """Send `event` with its answer's feed already open; the task that collects it."""
        feed = await self.client.events(thread_id, kinds=REPLY_KINDS).start()
        self._feeds.add(feed)
        try:
            sent = await self.client.send(thread_id, event)
        except BaseException:
            await feed.close()
            self._feeds.discard(feed)
            raise
        request = _Request(thread_id, event, external, sent.duplicate)
        answer = self.tasks.spawn(
            self._collect(feed, request), name=f"answer-{event.id}", critical=False
        )
        self._answers[event.id] = answer
        answer.add_done_callback(lambda done: self._answers.pop(event.id, None))
        return answer

    async def _collect(self, feed: EventFeed, request: _Request) -> Reply:
        try:
            async with feed:
                return await self._read(feed, request)
        finally:
            self._feeds.discard(feed)

    async def _read(self, feed: EventFeed, request: _Request) -> Reply:
        thread_id, event, external = request.thread_id, request.event, request.external
        answer = Answer(event.context.traceparent)
        if request.duplicate and answer.adopt(await self.client.turns(thread_id), event.id):
            # Sent before (by this bridge before a restart, say): JetStream dropped the
            # repeat, so no event will come; the thread has the answer already.
            return answer.reply(thread_id, external)
        try:
            async with asyncio.timeout(self.timeout):
                async for delivery in feed:
                    progress = answer.add(delivery.event)
                    if progress is Progress.DONE:
                        break
                    if progress is Progress.SKIPPED:  # a retry: answered before
                        answer.adopt(await self.client.turns(thread_id), event.id)
                        break
        except TimeoutError:
            if not answer.adopt(await self.client.turns(thread_id), event.id):
                return Reply(
                    "error",
                    f"no answer within {self.timeout:g}s (request_timeout); it will be "
                    "published on the channel's .out subject when it is ready",
                    thread_id,
                    external,
                )
        return answer.reply(thread_id, external)

    async def _respond(self, inbox: str, answer: asyncio.Task[Reply]) -> None:
        try:
            reply = await asyncio.shield(answer)  # other retries may wait for it too
        except OreError as exc:
            reply = Reply("error", f"no answer: {exc}")
        await self.respond(inbox, reply)
