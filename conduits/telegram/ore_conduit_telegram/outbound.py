"""Outbound: ore output events -> what a Telegram chat shows.

One `ThreadRenderer` per ore thread handles its events in order; threads render
concurrently. An answer (the output events of one user message: they carry its
traceparent) becomes one or more Telegram messages, the first replying to the user's:

- while the turn runs, the chat shows "typing" (`sendChatAction`, renewed every few
  seconds);
- text deltas are shown as plain text (half-written Markdown would be refused as
  entities) at most every `flush_interval` seconds: in a private chat as a draft
  (`sendMessageDraft`), elsewhere as one message (`sendMessage`, then `editMessageText`),
  an intermediate edit being skipped when the chat's budget is short;
- at `lifecycle: done` the answer is shown for good: split into parts of at most
  `message_chars` characters (code fences balanced), each as Telegram HTML, or as plain
  text when Telegram refuses the entities; a cancelled or failed answer ends with a
  marker. Final sends and edits go through the engine's pacing (`retry_after` waited
  out, an outage tried again) until the engine's deadline.
- every message sent is recorded in the conduit's state before the next step, and the
  record names the answer, whether it is finished, and the stored sequence up to which
  every answer of the thread was shown: a restarted conduit (its durable feed gives it
  again what it had not confirmed) finishes the messages it started, and skips answers
  it showed.

Telegram cannot be asked what a chat shows: the record names each send before its
call (the intent), and a conduit restarted after a kill between Telegram accepting a
message and the record of it looks for that part in the chat before it sends it again
(`landed`). Another endpoint's messages on a linked thread are the engine's relayed
copies (`ore_core.conduit.copies`), posted through `TelegramPlatform`.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import structlog

from ore_conduit_telegram.api import TelegramError
from ore_conduit_telegram.ids import Conversation
from ore_conduit_telegram.landed import Intent, find_landed
from ore_conduit_telegram.platform import TelegramPlatform, message_of, platform_id
from ore_conduit_telegram.shield import uninterrupted
from ore_conduit_telegram.text import split_text
from ore_core import (
    ApiError,
    ArtifactEvent,
    ErrorEvent,
    LifecycleEvent,
    NoticeEvent,
    OutputEvent,
    PropertiesEvent,
    Text,
    TextDelta,
)
from ore_core.conduit import (
    AnswerRecord,
    Delivery,
    PlatformError,
    RateLimited,
    SettingsCache,
    classify,
    metrics,
    until_answered,
)
from ore_core.conduit.copies import COPY_DEADLINE, Copy
from ore_core.events import DeliveryEvent, ReactionEvent

if TYPE_CHECKING:
    from ore_core.conduit.engine import Engine

__all__ = ["OUTPUT_KINDS", "Outbound", "ThreadRenderer"]

log = structlog.get_logger("ore.conduit.telegram")

OUTPUT_KINDS = frozenset(
    {"text_delta", "text", "turn_complete", "lifecycle", "error", "notice"}
    | {"properties", "turn_deleted", "delivery", "reaction"}  # bridging
)
"""The output kinds the conduit renders."""

_TYPING_EVERY = 4.5  # seconds: Telegram shows a chat action for about 5
_TYPING_AT_MOST = 600.0  # seconds of "typing" for one answer (its end may never come)
_R = TypeVar("_R")
_UNKNOWN = "\x00"  # what a message of an earlier run shows: never equal to a text


def _draft_id(trace: str) -> int:
    """A non-zero draft id that is a function of the answer."""
    return int(hashlib.sha256(trace.encode()).hexdigest()[:7], 16) + 1


@dataclass
class _Answer:
    """The answer to one user message, as far as it is known."""

    trace: str
    raw: str = ""  # the streamed text (deltas; text artifacts joined once complete)
    texts: list[str] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)
    error: str | None = None
    cancelled: bool = False
    messages: list[int] = field(default_factory=list)  # Telegram message ids of its parts
    shown: str = ""  # what the streamed message or draft shows
    running: bool = False
    drafts: bool = True
    after: int = 0  # the thread's stored sequence up to which every answer was shown
    sequence: int = 0  # the last stored batch of this answer handled
    piece_done: bool = False
    flushed_at: float = float("-inf")
    typing_at: float = float("-inf")
    typing_since: float = float("-inf")
    in_flight: list[int] = field(default_factory=list)
    """Parts whose send was under way when an earlier run of the conduit stopped: Telegram
    may show them twice (kept in the answer record as `in_flight`)."""


class Outbound:
    """What every thread's renderer shares: the engine's parts and the adapter's."""

    def __init__(self, engine: Engine, platform: TelegramPlatform) -> None:
        self.name = engine.name
        self.client = engine.client
        self.platform = platform
        self.api = platform.api
        self.config = platform.config
        self.state = platform.state
        self.pacing = engine.pacing
        self.copies = engine.copies
        self.finished = platform.finished
        self.mark_finished = platform.mark_finished

    async def paced(self, conversation: str, call: Callable[[], Awaitable[_R]]) -> _R:
        """`call()` through the engine's pacing of `conversation` (a 429's wait, an
        outage tried again) until the engine's deadline."""
        deadline = asyncio.get_running_loop().time() + COPY_DEADLINE
        return await self.pacing.call(conversation, call, deadline=deadline)


class ThreadRenderer:
    """Renders one ore thread's events into its Telegram chat, in order (its `Lane`)."""

    def __init__(self, engine: Engine, platform: TelegramPlatform, thread_id: str) -> None:
        self.out = outbound = Outbound(engine, platform)
        self.api = outbound.api
        self.config = outbound.config
        self.thread_id = thread_id
        self.place: Conversation | None = None
        self.answers: dict[str, _Answer] = {}
        self.last_sequence = 0
        self.settings = SettingsCache()  # a linked thread's label and answer settings

    # -- the lane ---------------------------------------------------------------------

    async def open(self) -> None:
        """Find the thread's chat before its first event."""
        self.place = await self._place()

    def busy(self) -> bool:
        """An answer is being written: the lane stays while it waits for its end."""
        return bool(self.answers)

    async def _place(self) -> Conversation | None:
        """The Telegram conversation of the ore thread (None: not Telegram's): in its
        metadata, or, for a thread linked here from another conduit, in the state."""
        try:
            info = await self.while_away(lambda: self.out.client.get_thread(self.thread_id))
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise
        self.settings.load(self.thread_id, info.metadata)
        place = Conversation.from_metadata(info.metadata)
        return place

    async def while_away(self, call: Callable[[], Awaitable[_R]]) -> _R:
        """`call()`, tried again while the core is away."""
        return await until_answered(
            call, "core unreachable", level="info", thread_id=self.thread_id
        )

    # -- events -----------------------------------------------------------------------

    async def handle(self, delivery: Delivery) -> None:
        """Render one event of the thread."""
        try:
            event = delivery.event
            if isinstance(event, PropertiesEvent):
                self.settings.update(self.thread_id, event)
            elif event.context.provenance in (self.out.name, "", "app"):
                await self._handle_event(event, delivery.sequence)
            else:
                await self._relay(delivery)  # another endpoint's, on a linked thread
        finally:
            if delivery.sequence is not None:
                self.last_sequence = max(self.last_sequence, delivery.sequence)

    async def _relay(self, delivery: Delivery) -> None:
        """Another endpoint's event: its message as a labelled copy, its answer (final
        text only) when the gateway answers everywhere, its reaction as the bot's own
        (`Copies`, `classify`)."""
        if self.place is None:
            return  # a linked thread that no message here has reached yet
        relayed = classify(delivery, self.out.name, self.settings.get(self.thread_id))
        event = delivery.event
        if relayed.action == "delivery" and isinstance(event, DeliveryEvent):
            if event.status == "failed":  # another endpoint could not show one of ours
                await self._say(relayed.text)
        elif delivery.sequence is not None and (
            relayed.action in ("relayed", "edited", "deleted")
            or (relayed.action == "answer" and relayed.turn_id)
        ):  # live-only: a copy comes with a stored batch
            copy = Copy(self.thread_id, self.place.key, delivery.sequence, relayed)
            await self.out.copies.show(copy)
        elif (
            delivery.sequence is not None
            and relayed.action == "reacted"
            and isinstance(event, ReactionEvent)
        ):
            copy = Copy(self.thread_id, self.place.key, delivery.sequence, relayed)
            lines = self.settings.get(self.thread_id).reaction_lines
            await self.out.copies.react(copy, event, lines=lines)

    async def _say(self, text: str) -> None:
        """A line of the conduit's own in the chat (plain text)."""
        assert self.place is not None
        try:
            await self.paced(lambda: self.out.platform.send(self.key, text, html=False))
        except PlatformError as exc:
            log.info("delivery status not shown", thread_id=self.thread_id, error=exc.detail)

    async def _handle_event(self, event: OutputEvent, sequence: int | None) -> None:
        if self.place is None or event.context.provenance != self.out.name:
            return  # not a Telegram thread, or another conduit's message
        trace = event.context.traceparent
        if not trace or trace in self.out.finished:
            return
        answer = self.answers.get(trace)
        if answer is None:
            answer = _Answer(trace, after=self.last_sequence, drafts=self._drafts())
            if not await self._recover(answer, sequence):
                return
            self.answers[trace] = answer
        if sequence is not None:
            answer.sequence = max(answer.sequence, sequence)
        if isinstance(event, LifecycleEvent):
            if event.phase == "submitted":
                if not answer.texts:
                    answer.raw = ""  # a turn begun again (its core died): its text restarts
                answer.running = True
                answer.typing_since = self.api.limits.now()
                await self._typing(answer)
            elif event.phase == "cancelled":
                answer.cancelled = True
            elif event.phase == "done":
                await self._finish(answer)
        elif isinstance(event, ArtifactEvent):
            self._add_text(answer, event)
        elif isinstance(event, ErrorEvent):
            answer.error = event.message
        elif isinstance(event, NoticeEvent):
            answer.notices.append(event.content)

    def _drafts(self) -> bool:
        assert self.place is not None
        return self.config.drafts and self.place.kind == "private"

    def _add_text(self, answer: _Answer, event: ArtifactEvent) -> None:
        artifact = event.artifact
        if isinstance(artifact, TextDelta):
            if answer.piece_done:
                answer.raw += "\n\n"
                answer.piece_done = False
            answer.raw += artifact.content
        elif isinstance(artifact, Text):
            answer.texts.append(artifact.content)
            answer.raw = "\n\n".join(answer.texts)
            answer.piece_done = True

    async def _recover(self, answer: _Answer, sequence: int | None) -> bool:
        """Adopt what an earlier run recorded for this answer; False: it was shown."""
        record = await self.out.state.record(self.thread_id)
        verdict = record.judge(answer.trace, sequence)
        if verdict == "shown":
            self.out.mark_finished(answer.trace)
            return False
        if verdict == "new":
            answer.after = max(answer.after, record.upto)
            return True
        answer.after = record.upto
        answer.messages = [int(m) for m in record.messages]
        answer.in_flight = [int(p) for p in record.extra.get("in_flight", ())]
        intent = Intent.of_record(dict(record.extra))
        if intent is not None:  # the send after the intent; its outcome unknown
            await self._look_for(answer, intent)
        answer.shown = _UNKNOWN  # unknown: rewritten when the answer is done
        answer.drafts = answer.drafts and not answer.messages
        return True

    async def _look_for(self, answer: _Answer, intent: Intent) -> None:
        """Find the part of a send under way when an earlier run stopped (`landed`):
        kept when it is in the chat, sent again when it is not or cannot be told."""
        assert self.place is not None
        found = await find_landed(self, intent)
        if found.outcome == "unknown":
            answer.in_flight.append(intent.part)
            log.warning(
                "a send was under way when the conduit stopped: Telegram may show it twice",
                thread_id=self.thread_id,
                part=intent.part,
            )
        elif found.outcome == "absent":
            log.info("a send under way at the stop did not land", thread_id=self.thread_id)
        else:
            answer.messages[intent.part : intent.part + 1] = [found.message]
            log.info("a send under way at the stop had landed", thread_id=self.thread_id)
        self._save(answer)
        if found.message:
            await self.out.state.add_to_chain(self.place.chat, found.message, self.place.root)
            await self.out.state.add_answered(self.place.chat, found.message, answer.trace)

    def _save(self, answer: _Answer, *, final: bool = False, sending: Intent | None = None) -> None:
        """Record the answer now (committed on the loop: see State). `sending`: the part
        about to be sent (the intent, so a restart can look for it: `landed`)."""
        extra: dict[str, Any] = {"in_flight": answer.in_flight} if answer.in_flight else {}
        if sending is not None:
            extra.update(sending.to_record())
        record = AnswerRecord.of(
            answer.trace,
            answer.messages,
            final=final,
            sequence=answer.sequence,
            after=answer.after,
            **extra,
        )
        self.out.state.save_record(self.thread_id, record)

    # -- timing -----------------------------------------------------------------------

    def due(self) -> float | None:
        """Seconds until a flush or a chat action is due (None: nothing to do)."""
        now = self.api.limits.now()
        due: float | None = None
        for answer in self.answers.values():
            times = []
            if self._typing_due(answer, now):
                times.append(answer.typing_at + _TYPING_EVERY - now)
            if answer.raw != answer.shown and answer.shown != _UNKNOWN:
                times.append(answer.flushed_at + self.config.flush_interval - now)
            for wait in times:
                due = wait if due is None else min(due, wait)
        return due

    def _typing_due(self, answer: _Answer, now: float) -> bool:
        return answer.running and now - answer.typing_since < _TYPING_AT_MOST

    async def tick(self) -> None:
        """Renew "typing" and show more of streamed answers, where due."""
        now = self.api.limits.now()
        for answer in list(self.answers.values()):
            if self._typing_due(answer, now) and now - answer.typing_at >= _TYPING_EVERY:
                await self._typing(answer)
            if (
                answer.raw != answer.shown
                and answer.shown != _UNKNOWN
                and now - answer.flushed_at >= self.config.flush_interval
            ):
                await self._progress(answer)

    # -- Telegram ---------------------------------------------------------------------

    @property
    def key(self) -> str:
        """The thread's conversation, as the platform and the pacing name it."""
        assert self.place is not None
        return self.place.key

    async def paced(self, call: Callable[[], Awaitable[_R]]) -> _R:
        """`call()` through the engine's pacing of this conversation."""
        return await self.out.paced(self.key, call)

    def where(self) -> dict[str, Any]:
        """Where the thread's chat actions and drafts go: its chat, and its topic."""
        assert self.place is not None
        where: dict[str, Any] = {"chat_id": self.out.platform.chat(self.place.chat)}
        if self.place.topic:  # the General topic and plain chats: no thread id
            where["message_thread_id"] = self.place.topic
        return where

    async def _typing(self, answer: _Answer) -> None:
        """Show "typing" (skipped while the chat is paused: it must never delay text)."""
        assert self.place is not None
        answer.typing_at = self.api.limits.now()
        if self.api.limits.paused_for(self.place.chat, "sendChatAction") > 0:
            return
        try:
            await self.api.call("sendChatAction", action="typing", **self.where())
        except PlatformError as exc:
            log.info("chat action not shown", thread_id=self.thread_id, error=exc.detail)

    async def _progress(self, answer: _Answer) -> None:
        """Show more of an answer that is still being written (plain text), once: an
        intermediate text that fails waits for the next flush."""
        assert self.place is not None
        parts = split_text(answer.raw, self.config.message_chars)
        if not parts:
            return
        answer.flushed_at = self.api.limits.now()
        try:
            if answer.drafts:
                draft = {"draft_id": _draft_id(answer.trace), "text": parts[-1]}
                await self.api.call("sendMessageDraft", **draft, **self.where())
                answer.shown = answer.raw
                return
            preview = parts[0]
            if not self.api.limits.has_room(self.place.chat):
                return  # intermediate text waits: the final text must not
            if not answer.messages:
                await uninterrupted(self._post_part(answer, 0, preview, html=False, paced=False))
            elif preview != answer.shown:
                await self.edit(answer.messages[0], preview, html=False, paced=False)
            answer.shown = preview if len(parts) > 1 else answer.raw
        except RateLimited:
            return  # the chat is paused: the text waits for the next flush
        except PlatformError as exc:
            if answer.drafts and isinstance(exc, TelegramError):
                log.info("drafts refused: editing instead", error=exc.description)
                answer.drafts = False
            else:
                log.info("intermediate text not shown", thread_id=self.thread_id, error=exc.detail)

    async def _post_part(
        self, answer: _Answer, index: int, text: str, *, html: bool, paced: bool = True
    ) -> None:
        """Send part `index` of the answer and record it before anything else happens
        (the first part replies to the user's message)."""
        assert self.place is not None
        before = answer.messages[index - 1] if 0 < index <= len(answer.messages) else 0
        asked = await self.out.state.asked(answer.trace)
        self._save(answer, sending=Intent(index, text, html, before or asked))
        reply_to = platform_id(self.place.chat, asked) if asked and index == 0 else ""

        async def send() -> str:
            return await self.out.platform.send(self.key, text, html=html, reply_to=reply_to)

        try:
            posted = message_of(await (self.paced(send) if paced else send()))
        except PlatformError:  # refused, or never carried out: Telegram shows nothing
            self._save(answer)
            raise
        answer.messages[index : index + 1] = [posted]
        self._save(answer)
        await self.out.state.add_to_chain(self.place.chat, posted, self.place.root)
        await self.out.state.add_answered(self.place.chat, posted, answer.trace)

    async def edit(self, message: int, text: str, *, html: bool, paced: bool = True) -> bool:
        """Make `message` show `text`; False if it is gone (deleted by someone)."""
        assert self.place is not None
        pid = platform_id(self.out.platform.chat(self.place.chat), message)

        async def change() -> None:
            await self.out.platform.change(pid, text, html=html)

        try:
            await (self.paced(change) if paced else change())
        except TelegramError as exc:
            if exc.says("message to edit not found") or exc.says("can't be edited"):
                return False
            raise
        return True

    async def _finish(self, answer: _Answer) -> None:
        """The answer is complete: show exactly it, in as many messages as it needs."""
        try:
            body = "\n\n".join(answer.texts) if answer.texts else answer.raw
            if not body.strip() and answer.notices:
                body = "\n".join(answer.notices)
            marker = ""
            if answer.cancelled:
                marker = "(interrupted)"
            elif answer.error is not None:
                marker = f"(error: {answer.error[:200]})"
            text = body.rstrip()
            if marker:
                text = f"{text}\n\n{marker}" if text else marker
            parts = split_text(text, self.config.message_chars)
            answer.running = False
            try:
                await self._show_final(answer, parts)
            except PlatformError:
                metrics.delivery_failed(self.out.name)  # refused for good: logged by the lane
                raise
            if parts:  # the `done` of a relay without answers shows nothing: no delivery
                metrics.delivered(self.out.name)
            self._save(answer, final=True)
            self.out.mark_finished(answer.trace)
        finally:
            self.answers.pop(answer.trace, None)

    async def _show_final(self, answer: _Answer, parts: list[str]) -> None:
        """Make the answer's messages show `parts` (editing those it has, posting the
        rest, deleting what it no longer needs)."""
        for index, part in enumerate(parts):
            if index < len(answer.messages) and await self.edit(
                answer.messages[index], part, html=True
            ):
                continue
            await uninterrupted(self._post_part(answer, index, part, html=True))
        for extra in answer.messages[len(parts) :]:
            await self.delete(extra)
        answer.messages = answer.messages[: len(parts)]

    async def delete(self, message: int) -> None:
        """Delete one of the bot's messages (one already gone is logged)."""
        assert self.place is not None
        pid = platform_id(self.out.platform.chat(self.place.chat), message)
        await self.paced(lambda: self.out.platform.delete(self.key, pid))
