"""Answer rendering: a thread's output on the platform, one lane per thread (`ThreadLanes`).

The conduit's own conversation shows its answers: on a platform that edits and streams,
the text as it comes, by editing the answer's message at most once per
`stream_interval` (a second by default: chat APIs limit edits), split into more
messages at `max_message_length` without breaking code fences; elsewhere each finished
text once. Errors and notices are parts of their own kind; each part replies to the
user message it answers (`Part.reply_to`: that message's platform id).

On a platform without idempotency keys (`Capabilities.idempotency == "none"`) each
part is claimed in the answer record (`PartClaims`) before it is posted and its
platform id recorded after: a conduit restarted after a kill -9 (its durable feed gives
it the answer's stored events again) adopts the parts recorded, editing them to their
text, and posts the one part it cannot be sure of with `Part.repeat` set (the adapter
may look for it, or mark it). On a platform that reads back (`ReadsBack`) a part
already out is found before it is posted. Every part posted is noted in `Posted` with
the turn it shows, once the core stored it.

On a platform with drafts (`Drafts`: Telegram's private chats) the text so far is
shown as a draft (its last part) instead of a message edited as it grows, and the
finished answer is posted; a draft refused makes that answer stream by edits.

On a platform that shows that the bot is writing (`Types`), each answer of the
conversation's own shows it from its start (`submitted`) to its end, renewed every
`TYPING_EVERY` seconds, never while the conversation is paused by a rate limit (text
first) and for `TYPING_AT_MOST` seconds at most.

Everything else of a linked thread goes to the copy engine (`Copies`): another
endpoint's messages, edits, deletes and reactions, and its answers when the gateway
answers `all`;
a delivery report about one of this endpoint's messages is shown as a notice.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from functools import partial
from typing import TypeVar

import structlog

from ore_core.artifacts.kinds import Text, TextDelta
from ore_core.conduit.answers import PartClaims
from ore_core.conduit.capabilities import Capabilities
from ore_core.conduit.conversations import Conversations
from ore_core.conduit.copies import COPY_DEADLINE, Copies, Copy
from ore_core.conduit.feed import Delivery
from ore_core.conduit.pacing import Pacing
from ore_core.conduit.platform import (
    Drafts,
    Part,
    Platform,
    PlatformError,
    ReadsBack,
    Types,
    part_key,
)
from ore_core.conduit.posted import Posted, TurnOf
from ore_core.conduit.relay import classify, split_message
from ore_core.events import (
    ArtifactEvent,
    DeliveryEvent,
    ErrorEvent,
    LifecycleEvent,
    NoticeEvent,
    PropertiesEvent,
    ReactionEvent,
    TurnCompleteEvent,
)
from ore_core.turn import Role

__all__ = ["STREAM_INTERVAL", "TYPING_AT_MOST", "TYPING_EVERY", "AnswerLane", "Outbound"]

log = structlog.get_logger("ore.conduit.answering")

_T = TypeVar("_T")

STREAM_INTERVAL = 1.0
"""Seconds between two edits of a streamed answer at most (without `delta_interval`)."""

TYPING_EVERY = 4.5
"""Seconds between two "typing" calls while an answer runs (Telegram shows one for 5)."""

TYPING_AT_MOST = 600.0
"""Seconds "typing" is renewed for one answer at most (its end may never come)."""


@dataclass(frozen=True, slots=True)
class Outbound:
    """What every thread's lane shares: the conduit's name, its platform and the engine
    parts that act on it."""

    name: str
    platform: Platform
    capabilities: Capabilities
    conversations: Conversations
    copies: Copies
    pacing: Pacing
    stream_interval: float = STREAM_INTERVAL
    claims: PartClaims | None = None
    """The answer record, for a platform without idempotency keys (None: not kept)."""
    posted: Posted | None = None
    """Where every part posted is noted (None: nowhere)."""

    @property
    def streams(self) -> bool:
        """Is text shown as it comes (by editing the answer's message)?"""
        return self.capabilities.streaming and self.capabilities.edit


@dataclass(slots=True)
class _Answer:
    """One answer being shown: its trace, whom it replies to, its text so far and its
    messages; `posts` counts its posts (each post's key is its trace and number)."""

    trace: str
    reply_to: str = ""
    posts: int = 0
    text: str = ""
    messages: list[str] = field(default_factory=list)
    shown: str = ""  # the text the messages show
    flushed: float = 0.0  # loop time of the last edit
    drafts: bool = True  # shown as a draft while it is written, where the platform can
    drafted: str = ""  # the text its draft shows


class AnswerLane:
    """The `Lane` of one thread (see the module docstring)."""

    def __init__(self, thread_id: str, out: Outbound) -> None:
        self.thread_id = thread_id
        self.out = out
        self.conversation: str | None = None
        self._answers: dict[str, _Answer] = {}  # traceparent -> the answer to that message
        self._streaming: _Answer | None = None
        self._turns: dict[str, TurnOf] = {}  # traceparent -> the answer's turn, once stored
        self._typing: dict[str, tuple[float, float]] = {}  # trace -> (since, last call)

    async def open(self) -> None:
        self.conversation = await self.out.conversations.conversation_of(self.thread_id)

    def busy(self) -> bool:
        return self._streaming is not None or bool(self._typing_due())

    def due(self) -> float | None:
        loop = asyncio.get_running_loop()
        waits = [max(0.0, last + TYPING_EVERY - loop.time()) for last in self._typing_due()]
        answer = self._streaming
        if answer is not None and answer.text != answer.shown:
            waits.append(max(0.0, answer.flushed + self.out.stream_interval - loop.time()))
        return min(waits, default=None)

    async def tick(self) -> None:
        answer, now = self._streaming, asyncio.get_running_loop().time()
        flush = answer is not None and answer.flushed + self.out.stream_interval <= now
        if answer is not None and flush and answer.text != answer.shown:
            await self._show(answer, final=False)
        for trace, (_, last) in list(self._typing.items()):
            if last + TYPING_EVERY <= now:
                await self._type(trace)

    def _typing_due(self) -> list[float]:
        """The last "typing" call of each running answer that still shows it (those past
        `TYPING_AT_MOST` are forgotten)."""
        now = asyncio.get_running_loop().time()
        for trace, (since, _) in list(self._typing.items()):
            if now - since >= TYPING_AT_MOST:
                del self._typing[trace]
        return [last for _, last in self._typing.values()]

    async def _type(self, trace: str) -> None:
        """Show "typing" for the answer `trace` (skipped while the conversation is paused:
        it must never delay text; a failure is logged)."""
        assert self.conversation is not None
        platform, now = self.out.platform, asyncio.get_running_loop().time()
        if not isinstance(platform, Types):
            return
        since, _ = self._typing.get(trace, (now, now))
        self._typing[trace] = (since, now)
        if self.out.pacing.paused(self.conversation):
            return
        try:
            await platform.typing(self.conversation)
        except PlatformError as exc:
            log.info("typing not shown", thread_id=self.thread_id, error=exc.detail)

    async def handle(self, delivery: Delivery) -> None:
        event = delivery.event
        if isinstance(event, PropertiesEvent):
            self.out.conversations.settings.update(delivery.thread_id, event)
            return
        if self.conversation is None:
            return  # a thread of no conversation of this conduit
        settings = self.out.conversations.settings.get(self.thread_id)
        relayed = classify(delivery, self.out.name, settings)
        if relayed.action in ("relayed", "edited", "deleted") or (
            relayed.action == "answer" and relayed.turn_id and relayed.origin != self.out.name
        ):
            if delivery.sequence is not None:  # live-only: a copy comes with a stored batch
                copy = Copy(self.thread_id, self.conversation, delivery.sequence, relayed)
                await self.out.copies.show(copy)
        elif relayed.action == "reacted" and isinstance(event, ReactionEvent):
            if delivery.sequence is not None:
                copy = Copy(self.thread_id, self.conversation, delivery.sequence, relayed)
                await self.out.copies.react(copy, event, lines=settings.reaction_lines)
        elif relayed.action == "delivery" and isinstance(event, DeliveryEvent):
            severity = "info" if event.status == "delivered" else "warn"
            notice = Part(relayed.text, kind="notice", severity=severity)
            await self._post(notice, _Answer(f"delivery.{delivery.sequence}"))
        elif relayed.action in ("own", "answer") and relayed.origin == self.out.name:
            await self._own(delivery)
        elif isinstance(event, NoticeEvent) and relayed.origin == "app":
            await self._own(delivery)  # the thread's own notice (a compaction's one line)

    async def _own(self, delivery: Delivery) -> None:
        """An event of this conduit's own conversation (or the thread's own notice)."""
        event = delivery.event
        trace = getattr(getattr(event, "context", None), "traceparent", "")
        if isinstance(event, TurnCompleteEvent):
            if event.turn.role == Role.USER:
                self._answers[trace] = _Answer(trace, event.turn.event_id)
            else:
                await self._settle(trace, event)
                if (turn := self._turns.pop(trace, None)) is not None:
                    turn.set_result(event.turn.id)
            return
        answer = self._answers.get(trace) or _Answer(trace)
        if isinstance(event, LifecycleEvent):
            if event.phase == "submitted" and delivery.sequence is None:
                await self._type(trace)  # live only: a stored one may be long over
            if event.phase in ("done", "cancelled"):
                self._typing.pop(trace, None)
                await self._finish(self._answers.pop(trace, None))
                if (turn := self._turns.pop(trace, None)) is not None:
                    turn.set_result("")  # ended without a stored turn: ask the core
        elif isinstance(event, ArtifactEvent) and isinstance(event.artifact, TextDelta):
            if self.out.streams:
                earlier = self._streaming
                if earlier is not None and earlier is not answer:
                    # The earlier answer's live end was missed (its stored turn will
                    # finish it): show it now, so the answers stay in their order.
                    await self._show(earlier)
                self._answers[trace] = answer
                answer.text += event.artifact.content
                self._streaming = answer
        elif isinstance(event, ArtifactEvent) and isinstance(event.artifact, Text):
            if self.out.streams and self._streaming is answer:
                answer.text = event.artifact.content
                await self._show(answer)
                # the next text of the answer: new messages
                self._answers[trace] = _Answer(trace, answer.reply_to, answer.posts)
                self._streaming = None
            else:
                self._answers[trace] = answer  # its posts count: the stored turn adds none
                await self._post(Part(event.artifact.content), answer)
        elif isinstance(event, ErrorEvent):
            await self._post(Part(event.message, kind="error"), answer)
        elif isinstance(event, NoticeEvent):
            notice = Part(event.content, kind="notice", severity=event.severity.label)
            await self._post(notice, answer)

    async def _settle(self, trace: str, event: TurnCompleteEvent) -> None:
        """The stored answer is the whole text, whatever of it came live. A core killed
        after it stored the turn but before its live `Text` went out answers again with
        only `done`; a conduit restarted after the answer was stored gets only the
        stored events. A streamed answer ends with the stored text; an answer nothing
        of which this process posted is posted now, under the keys the first posts had,
        so a platform that recognises a key edits what an earlier run posted; one the
        next answer's stream left behind is edited to its whole text."""
        texts = [part.content for part in event.turn.artifacts if isinstance(part, Text)]
        answer = self._answers.get(trace)
        if not texts:
            return
        if answer is not None and answer is self._streaming:
            answer.text = texts[-1]  # earlier texts of the turn ended their own messages
        elif answer is None or not answer.posts:
            answer = answer or _Answer(trace)
            self._answers[trace] = answer
            for text in texts:
                await self._post(Part(text), answer)
        elif answer.messages and answer.shown != texts[-1]:
            answer.text = texts[-1]  # a streamed answer left behind by the next one
            await self._show(answer)

    async def _finish(self, answer: _Answer | None) -> None:
        if answer is not None and answer is self._streaming:
            await self._show(answer)
            self._streaming = None

    async def _show(self, answer: _Answer, *, final: bool = True) -> None:
        """Edit the streamed answer's messages to its text so far (posting more parts);
        before it is `final`, a draft where the platform has them."""
        loop = asyncio.get_running_loop()
        answer.flushed = loop.time()
        if not answer.text.strip() or answer.text == answer.shown:
            return
        limit = self.out.capabilities.max_message_length
        parts = split_message(answer.text, limit)
        if not final and not answer.messages and await self._draft(answer, parts[-1]):
            answer.drafted = answer.text
            return
        for index, text in enumerate(parts):
            part = Part(text, reply_to=answer.reply_to)
            if index < len(answer.messages):
                message = answer.messages[index]
                await self._paced(partial(self._edit, message, part))
            else:
                answer.messages.append(await self._post_one(part, answer))
        answer.shown = answer.text

    async def _draft(self, answer: _Answer, text: str) -> bool:
        """Show `text` as the answer's draft; False where there are none (or the
        platform refused one: the answer streams by edits from now on)."""
        platform, conversation = self.out.platform, self.conversation
        assert conversation is not None
        answer.drafts = answer.drafts and isinstance(platform, Drafts)
        if not answer.drafts or not isinstance(platform, Drafts):
            return False
        if answer.drafted == answer.text:
            return True
        if not platform.drafts(conversation):
            answer.drafts = False
            return False
        try:
            await platform.draft(conversation, part_key(answer.trace, -1), text)
        except PlatformError as exc:
            log.info("draft refused: editing instead", thread_id=self.thread_id, error=exc.detail)
            answer.drafts = False
            return False
        return True

    async def _post(self, part: Part, answer: _Answer) -> None:
        limit = self.out.capabilities.max_message_length
        for text in split_message(part.text, limit):
            piece = Part(text, answer.reply_to, part.sender, part.kind, part.severity)
            try:
                await self._post_one(piece, answer)
            except PlatformError as exc:
                log.warning("answer not shown", thread_id=self.thread_id, error=exc.detail)
                return

    @staticmethod
    def _key(answer: _Answer) -> str:
        """The key of the answer's next post: the same after a restart that shows it again."""
        answer.posts += 1
        return part_key(answer.trace, answer.posts - 1)

    async def _post_one(self, part: Part, answer: _Answer) -> str:
        """Post the answer's next part (claimed first where the platform has no keys: see
        the module docstring), paced; its platform id."""
        assert self.conversation is not None
        conversation, platform, claims = self.conversation, self.out.platform, self.out.claims
        key = self._key(answer)
        found: str | None = None
        if claims is not None and self.out.capabilities.idempotency == "none":
            claim = await claims.claim(self.thread_id, key)
            found, part = claim.platform_id, replace(part, repeat=claim.unsure)
        elif isinstance(platform, ReadsBack) and self.out.capabilities.idempotency == "read_back":
            found = await self._paced(partial(platform.find, conversation, key))
        if found:  # posted before a restart: it shows this part now
            if self.out.capabilities.edit:
                await self._paced(partial(self._edit, found, part))
            posted = found
        else:
            posted = await self._paced(partial(platform.post, conversation, part, key))
            if claims is not None and self.out.capabilities.idempotency == "none":
                await claims.record(self.thread_id, key, posted)
        if self.out.posted is not None and answer.trace in self._answers:  # not a notice's
            self.out.posted.add(posted, self.thread_id, self._turn(answer.trace))
        return posted

    def _turn(self, trace: str) -> TurnOf:
        """The turn of the answer `trace`, set once the core stored it."""
        if trace not in self._turns:
            self._turns[trace] = Posted.turn()
        return self._turns[trace]

    async def _edit(self, message: str, part: Part) -> None:
        assert self.conversation is not None
        await self.out.platform.edit(self.conversation, message, part)

    async def _paced(self, call: Callable[[], Awaitable[_T]]) -> _T:
        assert self.conversation is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + COPY_DEADLINE
        return await self.out.pacing.call(self.conversation, call, deadline=deadline)
