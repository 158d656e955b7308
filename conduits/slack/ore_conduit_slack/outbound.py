"""Outbound: ore output events -> what a Slack thread shows.

One `ThreadRenderer` per ore thread handles that thread's events in order; threads are
rendered concurrently. An answer (every output event of one user message: they carry
its traceparent) becomes one or more Slack messages in the thread:

- while the turn runs, the thread shows a status (`assistant.threads.setStatus`);
- text deltas are coalesced (`flush_chars` / `flush_interval`) and streamed into a
  native stream (`chat.startStream` / `appendStream` / `stopStream`) or, in edit mode,
  into a posted message updated with `chat.update` no more often than `edit_interval`
  and the workspace's `updates_per_minute` allow (intermediate edits are dropped when
  the budget is spent; the final one never is);
- a message is full at `message_chars`: it is closed at a paragraph or line boundary
  (an open code fence closed) and the answer continues in the next message (the fence
  re-opened). A stream older than `stream_max_age` is closed and continued too; one that
  Slack ended anyway (`message_not_in_streaming_state`) is finished with `chat.update`;
- at `lifecycle: done` the messages are made to show exactly the ore answer (its text
  artifacts), with `_(interrupted)_` or `_(error: ...)_` at the end of a cancelled or
  failed one, and the status is cleared;
- every message is tagged with Slack message metadata (`ore_reply`: answer, part, last),
  and the answer's messages are kept in the ore thread's metadata (`slack.reply`), so a
  post whose response was lost is found again instead of posted twice, and a restarted
  conduit finishes the messages it had started instead of posting new ones: those the
  record names, and those it made and died before recording (found in the Slack thread:
  by their metadata, or, for a native stream, which has none until it is stopped, as the
  bot's message after the user's showing the start of the answer's text).
"""

from __future__ import annotations

import asyncio
import json
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import structlog

from ore_conduit_slack.api import Ambiguous, Budget, SlackApi, SlackError
from ore_conduit_slack.config import SlackConfig
from ore_conduit_slack.ids import REPLY_KEY, SlackThread, edit_event_id, traceparent_of
from ore_conduit_slack.ids import event_id as message_event_id
from ore_conduit_slack.inbound import Identity
from ore_conduit_slack.text import fence_at, neutralise, split_parts
from ore_core import (
    ApiError,
    ArtifactEvent,
    BusError,
    ErrorEvent,
    LifecycleEvent,
    NoticeEvent,
    OreError,
    OutputEvent,
    PermissionDenied,
    Text,
    TextDelta,
)
from ore_core.conduit import ConduitClient, Delivery, EventFeed, Hold

__all__ = ["OUTPUT_KINDS", "Clock", "Outbound", "ThreadRenderer"]

log = structlog.get_logger("ore.conduit.slack")

OUTPUT_KINDS = frozenset({"text_delta", "text", "turn_complete", "lifecycle", "error", "notice"})
"""The output kinds the conduit renders."""

_NO_STREAMS = frozenset(
    {
        "unknown_method",
        "not_allowed_token_type",
        "missing_scope",
        "feature_not_enabled",
        "not_allowed",
        "team_not_allowed",
    }
)  # startStream refusals meaning: this app or workspace cannot stream natively
_EXPIRED = "message_not_in_streaming_state"
_METADATA_EVENT = "ore_reply"
_IDLE = 30.0  # seconds a renderer with nothing to do waits before it ends
_FINISHED = 4096  # answers remembered as finished, so repeats of their events are skipped
_RETRY_LIMIT = 5.0
_R = TypeVar("_R")
_UNKNOWN = "\x00"  # what a message of an earlier run shows: never equal to a text


class Clock(Protocol):
    """Where the stream age is read from (`now()` in seconds)."""

    def now(self) -> float: ...


@dataclass
class _Message:
    """One Slack message of an answer: where it starts in the answer's text, what it shows."""

    ts: str
    start: int
    fence: str | None  # the code fence open where the message starts (re-opened at its top)
    shown: str = ""
    streaming: bool = False
    started_at: float = 0.0
    edited_at: float = float("-inf")
    tagged_last: bool = False  # its Slack metadata says it is the answer's last part

    def to_json(self) -> list[Any]:
        return [self.ts, self.start, self.fence, self.streaming]

    @classmethod
    def from_json(cls, data: list[Any]) -> _Message:
        return cls(str(data[0]), int(data[1]), data[2], streaming=bool(data[3]))


@dataclass(frozen=True)
class _Posted:
    """One of the bot's messages in a Slack thread, as `conversations.replies` lists it."""

    ts: str
    text: str
    payload: dict[str, Any]  # its `ore_reply` metadata payload ({}: none, e.g. a live stream)


@dataclass
class _Listing:
    """A Slack thread as `conversations.replies` lists it, oldest first."""

    posts: list[_Posted] = field(default_factory=list)  # the bot's messages
    others: list[tuple[str, str]] = field(default_factory=list)  # (ts, ts of its last edit)

    def asked(self, trace: str, thread: SlackThread) -> str:
        """The ts of the message (of a person, or of an allowed bot) whose answer has
        `trace` ("" if it is not listed: deleted, say)."""
        for ts, edited in self.others:
            message_id = message_event_id(thread.enterprise, thread.team, thread.channel, ts)
            if traceparent_of(message_id) == trace or (
                edited and traceparent_of(edit_event_id(message_id, edited)) == trace
            ):
                return ts
        return ""


def _ts_key(ts: str) -> tuple[int, int]:
    """A Slack ts as a sortable pair (seconds, micro-part): later messages sort after."""
    seconds, _, fraction = ts.partition(".")
    try:
        return int(seconds), int(fraction or 0)
    except ValueError:
        return 0, 0


def _starts_an_answer(event: OutputEvent, sequence: int | None) -> bool:
    """Is `event` one an answer starts with, live (`lifecycle: submitted`, or a notice
    before it)? A delta or a stored event first means the answer's start was missed
    (this run began in its middle or after it)."""
    if sequence is not None:
        return False
    if isinstance(event, LifecycleEvent):
        return event.phase == "submitted"
    return isinstance(event, NoticeEvent)


def _payload(message: dict[str, Any]) -> dict[str, Any]:
    """The `ore_reply` metadata payload of a listed message ({} if it has none)."""
    metadata = message.get("metadata") or {}
    if metadata.get("event_type") != _METADATA_EVENT:
        return {}
    payload = metadata.get("event_payload")
    return dict(payload) if isinstance(payload, dict) else {}


def _part(payload: dict[str, Any]) -> int:
    """The part number an `ore_reply` payload names (-1: none)."""
    try:
        return int(payload.get("part", -1))
    except (TypeError, ValueError):
        return -1


@dataclass
class _Answer:
    """The answer to one user message, as far as it is known."""

    trace: str
    user: str = ""
    raw: str = ""  # the streamed text (deltas; text artifacts joined once complete)
    texts: list[str] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)
    error: str | None = None
    cancelled: bool = False
    messages: list[_Message] = field(default_factory=list)
    native: bool | None = None  # None: not decided yet
    resumed: bool = False  # started by an earlier run of the conduit (rendered once done)
    unrecorded: list[_Posted] = field(default_factory=list)  # an earlier run's, to adopt
    after: int = 0  # the thread's last stored batch handled before this answer began
    sequence: int = 0  # the last stored batch of this answer handled
    status_set: bool = False
    piece_done: bool = False
    flushed_at: float = float("-inf")

    @property
    def key(self) -> str:
        """The answer's id in Slack message metadata (the trace id)."""
        return self.trace.split("-")[1] if self.trace.count("-") >= 3 else self.trace


class _Team:
    """What the conduit learnt about one workspace: budgets and whether it can stream."""

    def __init__(self, config: SlackConfig, now: Callable[[], float]) -> None:
        self.can_stream = config.streaming != "edit"
        self.updates = Budget(config.updates_per_minute / 60, 3, now)
        starts = config.stream_starts_per_minute
        self.starts = Budget(starts / 60, starts, now)


class Outbound:
    """Routes the durable feed's events to one renderer per thread (see the module docstring)."""

    def __init__(
        self,
        *,
        name: str,
        client: ConduitClient,
        api: SlackApi,
        config: SlackConfig,
        identity: Identity,
        clock: Clock,
        tasks: asyncio.TaskGroup,
    ) -> None:
        self.name = name
        self.client = client
        self.api = api
        self.config = config
        self.identity = identity
        self.clock = clock
        self.tasks = tasks
        self.renderers: dict[str, ThreadRenderer] = {}
        self.active: dict[str, str] = {}  # trace of an answer being written -> thread id
        self.finished: OrderedDict[str, None] = OrderedDict()  # traces
        self._teams: dict[str, _Team] = {}

    def team(self, team_id: str) -> _Team:
        """The budgets and capabilities of a workspace."""
        team = self._teams.get(team_id)
        if team is None:
            team = self._teams[team_id] = _Team(self.config, self.api.now)
        return team

    def answering(self, event_id: str) -> bool | None:
        """Is the answer to `event_id` being written? None: not started or unknown."""
        trace = traceparent_of(event_id)
        if trace in self.active:
            return True
        return False if trace in self.finished else None

    def mark_finished(self, trace: str) -> None:
        self.finished[trace] = None
        while len(self.finished) > _FINISHED:
            self.finished.popitem(last=False)

    async def serve(self, ready: asyncio.Event) -> None:
        """Open the durable feed (waiting for the core if it is away), set `ready`, and
        render its events until cancelled."""
        async with self.client.events(kinds=OUTPUT_KINDS, durable=self.config.durable) as feed:
            ready.set()
            await self.run(feed)

    async def run(self, feed: EventFeed) -> None:
        """Hand every delivery to its thread's renderer, until cancelled.

        Each is held until its renderer handled it: the durable cursor must not pass an
        event that a conduit killed meanwhile never rendered (asking the feed for the
        next event would otherwise count it as finished).
        """
        async for delivery in feed:
            renderer = self.renderers.get(delivery.thread_id)
            if renderer is None or renderer.ended:
                renderer = ThreadRenderer(self, delivery.thread_id)
                self.renderers[delivery.thread_id] = renderer
                self.tasks.create_task(renderer.run(), name=f"slack-render-{delivery.thread_id}")
            renderer.queue.put_nowait((delivery, feed.hold(delivery)))


class ThreadRenderer:
    """Renders one ore thread's events into its Slack thread, in order."""

    def __init__(self, outbound: Outbound, thread_id: str) -> None:
        self.out = outbound
        self.api = outbound.api
        self.config = outbound.config
        self.thread_id = thread_id
        self.queue: asyncio.Queue[tuple[Delivery, Hold]] = asyncio.Queue()
        self.ended = False
        self.slack: SlackThread | None = None
        self.answers: dict[str, _Answer] = {}
        self.last_sequence = 0  # the last stored batch of the thread handled

    # -- the loop ------------------------------------------------------------------

    async def run(self) -> None:
        """Handle events until idle for a while; failures are logged, never raised."""
        try:
            self.slack = await self._slack_thread()
            while True:
                item = await self._next()
                if item is None:
                    if self.queue.empty() and not self.answers:
                        return
                    continue
                delivery, hold = item
                await self._safely(self._handle, delivery)
                hold.release()
                if self.queue.empty():
                    await self._safely(self._flush_all, False)
        finally:
            self.ended = True

    async def _next(self) -> tuple[Delivery, Hold] | None:
        """The next delivery; None when a flush is due (or after a long idle)."""
        if not self.queue.empty():
            return self.queue.get_nowait()
        due = self._flush_due()
        timeout = _IDLE if due is None else max(due, 0.0)
        try:
            return await asyncio.wait_for(self.queue.get(), timeout)
        except TimeoutError:
            if due is not None:
                await self._safely(self._flush_all, True)
            return None

    async def _safely(self, step: Callable[..., Any], *args: Any) -> None:
        try:
            await step(*args)
        except OreError as exc:
            log.error("slack rendering failed", thread_id=self.thread_id, error=str(exc))
        except Exception:  # a bug rendering one event must not stop the other threads
            log.exception("slack rendering failed", thread_id=self.thread_id)

    async def _slack_thread(self) -> SlackThread | None:
        """The Slack thread of the ore thread (None: not a Slack thread); retried while away."""
        pause = 0.1
        while True:
            try:
                info = await self.out.client.get_thread(self.thread_id)
                return SlackThread.from_metadata(info.metadata)
            except ApiError as exc:
                if exc.status == 404:
                    return None
                failure: OreError = exc
            except PermissionDenied:
                raise
            except BusError as exc:
                failure = exc
            log.warning("cannot read thread metadata", thread_id=self.thread_id, error=str(failure))
            await asyncio.sleep(pause)
            pause = min(pause * 2, _RETRY_LIMIT)

    # -- events ------------------------------------------------------------------------

    async def _handle(self, delivery: Delivery) -> None:
        try:
            await self._handle_event(delivery.event, delivery.sequence)
        finally:
            if delivery.sequence is not None:
                self.last_sequence = max(self.last_sequence, delivery.sequence)

    async def _handle_event(self, event: OutputEvent, sequence: int | None) -> None:
        if self.slack is None or event.context.provenance != self.out.name:
            return  # not a Slack thread, or another conduit's message: it shows its own
        trace = event.context.traceparent
        if not trace or trace in self.out.finished:
            return
        answer = self.answers.get(trace)
        if answer is None:
            answer = _Answer(trace, user=event.context.user, after=self.last_sequence)
            self.answers[trace] = answer
            await self._recover(answer, sequence, fresh=_starts_an_answer(event, sequence))
            if trace in self.out.finished:
                del self.answers[trace]
                return
        if sequence is not None:
            answer.sequence = max(answer.sequence, sequence)
        self.out.active[trace] = self.thread_id
        if isinstance(event, LifecycleEvent):
            if event.phase == "submitted":
                await self._status(answer, self.config.status)
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

    async def _recover(self, answer: _Answer, sequence: int | None, *, fresh: bool) -> None:
        """Recover the messages an earlier run of the conduit made for this answer, or
        skip an answer it finished: from the reply record first, then from Slack.

        Live events (submitted, deltas) come before the turn's stored batch, which starts
        with the user's turn: no first event tells a new answer from one a previous run
        started, so the reply record is always read. Slack is asked only when an earlier
        run may have made messages it did not record (killed between the Slack call and
        the record): when the record names the answer unfinished, or when this run missed
        the answer's start (`fresh` is false: its first event is a delta or a stored
        one). A live answer that starts here costs no Slack call.
        """
        await self._read_record(answer, sequence)
        if answer.trace in self.out.finished:
            return
        if answer.messages or not fresh:
            await self._find_unrecorded(answer)

    async def _read_record(self, answer: _Answer, sequence: int | None) -> None:
        """Adopt the messages the reply record names for this answer, or skip an answer
        the record says was finished.

        The record names the thread's latest answer and `upto`: every other answer of
        the thread whose stored batch is at or before `upto` was finished (answers are
        rendered in order). A restarted conduit gets again what it had not confirmed to
        the core (its durable cursor lags behind what it rendered), so older answers are
        delivered again too: they are skipped, never posted twice.
        """
        try:
            info = await self._while_away(
                lambda: self.out.client.get_thread(self.thread_id), "read the reply record"
            )
            record = json.loads(info.metadata.get(REPLY_KEY) or "{}")
            upto = int(record.get("upto") or 0)
        except (OreError, ValueError, TypeError) as exc:
            log.warning("cannot read the reply record", thread_id=self.thread_id, error=str(exc))
            return
        if record.get("trace") != answer.trace:
            if sequence is not None and sequence <= upto:
                self.out.mark_finished(answer.trace)  # an older answer, shown before
            else:
                answer.after = max(answer.after, upto)
            return
        answer.after = upto
        if record.get("final"):
            self.out.mark_finished(answer.trace)
            return
        answer.messages = [_Message.from_json(m) for m in record.get("messages") or []]
        now = self.out.clock.now()
        for message in answer.messages:
            message.shown = _UNKNOWN  # a stream is closed, then every message is rewritten
            # Its age is unknown: counted from now, not from 0 (which made it look too old
            # and closed it half-shown, the answer continued in a new message).
            message.started_at = now
        answer.resumed = bool(answer.messages)
        answer.native = bool(record.get("native"))
        answer.status_set = True
        log.info("resuming an answer", thread_id=self.thread_id, messages=len(answer.messages))

    async def _find_unrecorded(self, answer: _Answer) -> None:
        """Find the messages an earlier run made for this answer and died before
        recording; they are adopted where the answer needs its next message (`_open`).

        A posted message says whose it is from the start (its metadata names the answer
        and part). A native stream carries no metadata until it is stopped
        (`chat.startStream` takes none), so one without metadata is a candidate only if it
        is the bot's, not known to any answer of this run, and after the user's message
        (or after the answer's last recorded message): it is adopted only if what it shows
        begins the text its part must show, so a person's message, another bot's, or
        another answer's are never touched. The answer is then held (rendered once done):
        only the complete text tells which stream is its.
        """
        assert self.slack is not None
        listing = await self._thread_messages("check the thread for an answer's messages")
        if listing is None:
            return
        known = {m.ts for other in self.answers.values() for m in other.messages}
        asked = listing.asked(answer.trace, self.slack)
        since = answer.messages[-1].ts if answer.messages else asked
        found = [
            posted
            for posted in listing.posts
            if posted.ts not in known
            and (
                posted.payload.get("answer") == answer.key
                if posted.payload
                else bool(since and posted.text) and _ts_key(posted.ts) > _ts_key(since)
            )
        ]
        if not found:
            return
        answer.unrecorded = found
        answer.resumed = True
        answer.status_set = True
        log.info(
            "found unrecorded messages of an answer", thread_id=self.thread_id, found=len(found)
        )

    def _adopt(self, answer: _Answer, content: str) -> _Posted | None:
        """The unrecorded message (`_find_unrecorded`) that is the answer's next part,
        which is to show `content`: the one whose metadata names that part, or a stream
        without metadata, after the answer's last message, showing the start of it."""
        part = len(answer.messages)
        after = _ts_key(answer.messages[-1].ts) if answer.messages else (0, 0)
        taken = {m.ts for other in self.answers.values() for m in other.messages}
        for posted in answer.unrecorded:
            if posted.ts in taken or _ts_key(posted.ts) <= after:
                continue
            if _part(posted.payload) == part if posted.payload else content.startswith(posted.text):
                answer.unrecorded.remove(posted)
                return posted
        return None

    async def _save(self, answer: _Answer, *, final: bool = False) -> None:
        """Keep the answer's messages in the ore thread's metadata (for a restart)."""
        record = {
            "trace": answer.trace,
            "native": bool(answer.native),
            "messages": [m.to_json() for m in answer.messages],
            "final": final,
            "upto": (answer.sequence or answer.after) if final else answer.after,
        }
        text = json.dumps(record)
        try:
            await self._while_away(
                lambda: self.out.client.set_metadata(self.thread_id, REPLY_KEY, text),
                "save the reply record",
            )
        except OreError as exc:
            log.warning("cannot save the reply record", thread_id=self.thread_id, error=str(exc))

    async def _while_away(self, call: Callable[[], Awaitable[_R]], purpose: str) -> _R:
        """`call()`, tried again while the core is away (BusError): the reply record is
        what tells a restarted conduit an answer it showed from a new one, so rendering
        without it (or without saving it) would post an answer twice after a crash."""
        pause = 0.1
        told = False
        while True:
            try:
                return await call()
            except PermissionDenied:
                raise
            except BusError as exc:
                if not told:
                    log.warning(
                        f"core unreachable, waiting to {purpose}",
                        thread_id=self.thread_id,
                        error=str(exc),
                    )
                    told = True
            await asyncio.sleep(pause)
            pause = min(pause * 2, _RETRY_LIMIT)

    async def _status(self, answer: _Answer, status: str) -> None:
        if not self.config.status or self.slack is None:
            return
        if not status and not answer.status_set:
            return
        try:
            await self.api.call(
                "assistant.threads.setStatus",
                self.slack.team,
                channel_id=self.slack.channel,
                thread_ts=self.slack.thread_ts,
                status=status,
            )
            answer.status_set = bool(status)
        except (SlackError, Ambiguous) as exc:
            log.info("status not set", thread_id=self.thread_id, error=str(exc))

    # -- streaming -----------------------------------------------------------------

    def _flush_due(self) -> float | None:
        """Seconds until an answer with pending text must be flushed (None: none pending)."""
        due: float | None = None
        now = self.api.now()
        for answer in self.answers.values():
            if answer.resumed or not self._pending(answer):
                continue
            wait = answer.flushed_at + self.config.flush_interval - now
            due = wait if due is None else min(due, wait)
        return due

    def _pending(self, answer: _Answer) -> int:
        shown = answer.messages[-1].start + len(answer.messages[-1].shown) if answer.messages else 0
        fence = answer.messages[-1].fence if answer.messages else None
        prefix = 0 if fence is None else len(f"```{fence}\n")
        return len(neutralise(answer.raw)) - (shown - prefix)

    async def _flush_all(self, timer: bool) -> None:
        now = self.api.now()
        for answer in list(self.answers.values()):
            if answer.resumed:
                continue
            pending = self._pending(answer)
            if pending <= 0:
                continue
            if pending >= self.config.flush_chars or (
                now - answer.flushed_at >= self.config.flush_interval
            ):
                answer.flushed_at = now
                await self._show(answer, neutralise(answer.raw), final=False)

    async def _show(self, answer: _Answer, text: str, *, final: bool) -> None:
        """Make the answer's messages show `text` (so far, or `final`)."""
        assert self.slack is not None
        if not text:
            return
        if not answer.messages:
            await self._open(answer, 0, None, text, final=final)
        while True:
            message = answer.messages[-1]
            prefix = "" if message.fence is None else f"```{message.fence}\n"
            segment = text[message.start :]
            if self._too_old(message) and not final and len(prefix + segment) > len(message.shown):
                cut = len(text)
                await self._close(
                    answer, message, self._closed_text(prefix, text[message.start : cut])
                )
                await self._open(answer, cut, fence_at(prefix + text[message.start : cut]), text)
                continue
            parts = split_parts(segment, self.config.message_chars, open_fence=message.fence)
            if len(parts) == 1:
                if final:
                    await self._close(answer, message, parts[0].text, last=True)
                else:
                    await self._progress(answer, message, prefix + segment)
                return
            first = parts[0]
            await self._close(answer, message, first.text)
            cut = message.start + len(first.body)
            await self._open(answer, cut, fence_at(prefix + first.body), text, final=final)

    def _closed_text(self, prefix: str, body: str) -> str:
        shown = prefix + body
        return shown.rstrip("\n") + "\n```" if fence_at(shown) is not None else shown

    def _too_old(self, message: _Message) -> bool:
        return message.streaming and (
            self.out.clock.now() - message.started_at >= self.config.stream_max_age
        )

    async def _open(
        self, answer: _Answer, start: int, fence: str | None, text: str, *, final: bool = False
    ) -> None:
        """Start the answer's next message at `start` of `text`, showing what fits."""
        assert self.slack is not None
        prefix = "" if fence is None else f"```{fence}\n"
        parts = split_parts(text[start:], self.config.message_chars, open_fence=fence)
        content = parts[0].text if final else prefix + parts[0].body
        last = final and len(parts) == 1
        part = len(answer.messages)
        if answer.unrecorded and (found := self._adopt(answer, content)) is not None:
            await self._adopt_message(answer, found, start, fence)
            return
        native = self._native(answer)
        started_at = self.out.clock.now()  # Slack counts a stream's age from its start call
        ts = await self._create(answer, part, content, native, last)
        if ts is None and native:  # the workspace cannot stream: post instead
            native = answer.native = False
            ts = await self._create(answer, part, content, native, last)
        assert ts is not None
        message = _Message(ts, start, fence, content, streaming=native)
        message.tagged_last = last and not native
        message.started_at = started_at
        message.edited_at = self.api.now()
        answer.messages.append(message)
        await self._save(answer)

    async def _adopt_message(
        self, answer: _Answer, found: _Posted, start: int, fence: str | None
    ) -> None:
        """Make an unrecorded message of an earlier run the answer's next part: it shows
        something unknown (it is rewritten when closed), and a stream is stopped first."""
        stream = not found.payload  # a stream that is live or that Slack ended
        message = _Message(found.ts, start, fence, _UNKNOWN, streaming=stream)
        message.started_at = self.out.clock.now()  # its age is unknown: counted from now
        if answer.native is None and not stream:
            answer.native = False
        answer.messages.append(message)
        log.info("adopting an unrecorded message", thread_id=self.thread_id, ts=found.ts)
        await self._save(answer)

    def _native(self, answer: _Answer) -> bool:
        """Stream this answer natively? Decided once per answer."""
        assert self.slack is not None
        if answer.native is None:
            team = self.out.team(self.slack.team)
            person = answer.user.startswith(("U", "W"))  # not a bot: streams address people
            recipient = person or self.slack.channel.startswith("D")
            answer.native = team.can_stream and recipient and team.starts.try_take()
        return answer.native

    async def _create(
        self, answer: _Answer, part: int, content: str, native: bool, last: bool
    ) -> str | None:
        """Post (or start streaming) one message; its ts. None: the stream was refused."""
        assert self.slack is not None
        thread = self.slack
        if native:
            method = "chat.startStream"
            args: dict[str, Any] = {
                "channel": thread.channel,
                "thread_ts": thread.thread_ts,
                "markdown_text": content,
                "recipient_team_id": thread.team,
                "recipient_user_id": answer.user or None,
            }
        else:
            method = "chat.postMessage"
            args = {
                "channel": thread.channel,
                "thread_ts": thread.thread_ts,
                "markdown_text": content,
                "metadata": self._metadata(answer, part, last),
            }
        args = {k: v for k, v in args.items() if v is not None}
        for _attempt in range(2):
            try:
                reply = await self.api.call(method, thread.team, **args)
                return str(reply["ts"])
            except SlackError as exc:
                if not native:
                    raise
                log.info("stream refused: posting instead", error=exc.error)
                if exc.error in _NO_STREAMS and self.config.streaming == "auto":
                    self.out.team(thread.team).can_stream = False
                return None
            except Ambiguous:
                found = await self._find(answer, part, content)
                if found is not None:
                    log.info("a post whose answer was lost was found", ts=found)
                    return found
        raise Ambiguous(method, "gave up after a lost response")

    async def _find(self, answer: _Answer, part: int, content: str) -> str | None:
        """The message the answer's part already is in the thread, if Slack has it."""
        listing = await self._thread_messages("check the thread for a lost post")
        known = {m.ts for m in answer.messages}
        for message in reversed(listing.posts if listing is not None else []):
            if message.ts in known:
                continue
            if message.payload.get("answer") == answer.key and _part(message.payload) == part:
                return message.ts
            if not message.payload and message.text == content:
                return message.ts  # a stream: its metadata comes when it stops
        return None

    async def _thread_messages(self, purpose: str) -> _Listing | None:
        """The bot's messages in the Slack thread, oldest first, with their `ore_reply`
        metadata payloads (and when the others were written); None when Slack could not
        be asked (logged with `purpose`)."""
        assert self.slack is not None
        try:
            replies = await self.api.call(
                "conversations.replies",
                self.slack.team,
                channel=self.slack.channel,
                ts=self.slack.thread_ts,
                include_all_metadata=True,
                limit=1000,
            )
        except (SlackError, Ambiguous) as exc:
            log.warning(
                "cannot list the slack thread",
                purpose=purpose,
                thread_id=self.thread_id,
                error=str(exc),
            )
            return None
        listing = _Listing()
        for message in replies.get("messages") or []:
            ts = str(message["ts"])
            if message.get("bot_id") == self.out.identity.bot_id:
                text = str(message.get("text") or "")
                listing.posts.append(_Posted(ts, text, _payload(message)))
            else:
                edited = message.get("edited") or {}
                listing.others.append((ts, str(edited.get("ts") or "")))
        return listing

    def _metadata(self, answer: _Answer, part: int, last: bool = False) -> dict[str, Any]:
        payload: dict[str, Any] = {"answer": answer.key, "part": part}
        if last:
            payload["last"] = True
        return {"event_type": _METADATA_EVENT, "event_payload": payload}

    async def _progress(self, answer: _Answer, message: _Message, target: str) -> None:
        """Show more of a message that is still being written."""
        assert self.slack is not None
        if target == message.shown:
            return
        if message.streaming and target.startswith(message.shown):
            try:
                await self.api.call(
                    "chat.appendStream",
                    self.slack.team,
                    channel=self.slack.channel,
                    ts=message.ts,
                    markdown_text=target[len(message.shown) :],
                )
                message.shown = target
                return
            except SlackError as exc:
                if exc.error != _EXPIRED:
                    raise
                log.info("stream ended by Slack: editing instead", ts=message.ts)
                message.streaming = False
                await self._save(answer)
        if message.streaming:
            return  # a text that changed behind the stream is fixed when the answer ends
        team = self.out.team(self.slack.team)
        if self.api.now() - message.edited_at < self.config.edit_interval:
            return
        if self.api.blocked_for(self.slack.team, "chat.update") > 0 or not team.updates.try_take(
            reserve=1
        ):
            return  # over the workspace's edit budget (one edit is kept for final texts)
        await self._update(message, target)

    async def _update(self, message: _Message, text: str, metadata: Any = None) -> None:
        assert self.slack is not None
        args: dict[str, Any] = {
            "channel": self.slack.channel,
            "ts": message.ts,
            "markdown_text": text,
        }
        if metadata is not None:
            args["metadata"] = metadata
        await self.api.call("chat.update", self.slack.team, **args)
        message.shown = text
        message.edited_at = self.api.now()
        if metadata is not None:
            message.tagged_last = bool(metadata["event_payload"].get("last"))

    async def _close(
        self, answer: _Answer, message: _Message, text: str, last: bool = False
    ) -> None:
        """Finish a message: it shows `text` for good."""
        assert self.slack is not None
        metadata = self._metadata(answer, answer.messages.index(message), last)
        if message.streaming:
            completes = text.startswith(message.shown)
            tail = text[len(message.shown) :] if completes else ""
            try:
                args: dict[str, Any] = {"channel": self.slack.channel, "ts": message.ts}
                if completes:  # else the metadata comes with the chat.update below
                    args["metadata"] = metadata
                if tail:
                    args["markdown_text"] = tail
                await self.api.call("chat.stopStream", self.slack.team, **args)
                message.shown += tail
            except SlackError as exc:
                if exc.error != _EXPIRED:
                    raise
            message.streaming = False
            if message.shown == text:
                return
        if message.shown == text and message.tagged_last == last:
            return
        await self.out.team(self.slack.team).updates.take()
        await self._update(message, text, metadata)

    async def _finish(self, answer: _Answer) -> None:
        """The answer is complete: show exactly it, clear the status, forget it."""
        try:
            body = "\n\n".join(answer.texts) if answer.texts else answer.raw
            if not body.strip() and answer.notices and not answer.messages:
                body = "\n".join(answer.notices)
            marker = ""
            if answer.cancelled:
                marker = "_(interrupted)_"
            elif answer.error is not None:
                marker = f"_(error: {answer.error[:200]})_"
            text = neutralise(body.rstrip())
            if marker:
                text = f"{text}\n\n{marker}" if text else marker
            if text:
                if answer.messages and not self._consistent(answer, text):
                    self._rewrite(answer)
                await self._show(answer, text, final=True)
                # Written: from now on deleting its message interrupts nothing.
                self.out.active.pop(answer.trace, None)
                self.out.mark_finished(answer.trace)
                await self._drop_extra(answer, text)
                await self._save(answer, final=True)
            await self._status(answer, "")
        finally:
            self.answers.pop(answer.trace, None)
            self.out.active.pop(answer.trace, None)
            self.out.mark_finished(answer.trace)

    def _consistent(self, answer: _Answer, text: str) -> bool:
        """Do the closed messages still fit the final text (it continues where they end)?"""
        last = answer.messages[-1]
        return last.start <= len(text)

    def _rewrite(self, answer: _Answer) -> None:
        """The final text does not fit the closed messages: restart from the first one."""
        answer.messages[1:] = []
        first = answer.messages[0]
        first.start, first.fence = 0, None

    async def _drop_extra(self, answer: _Answer, text: str) -> None:
        """Messages past the end of the final text (left by a rewrite) are deleted."""
        assert self.slack is not None
        while (
            answer.messages and answer.messages[-1].start >= len(text) and len(answer.messages) > 1
        ):
            extra = answer.messages.pop()
            try:
                await self.api.call(
                    "chat.delete", self.slack.team, channel=self.slack.channel, ts=extra.ts
                )
            except (SlackError, Ambiguous) as exc:
                log.warning("cannot delete a surplus message", ts=extra.ts, error=str(exc))
