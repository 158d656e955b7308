"""Outbound: ore output events -> what a Slack thread shows.

One `ThreadRenderer` per ore thread handles that thread's events in order: it is the
engine's lane of the thread (`SlackConduit.lane`), so threads are rendered
concurrently, and another endpoint's messages go to the engine's copy engine
(`Copies`). An answer (every output event of one user message: they carry
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
  conduit finishes the messages it had started instead of posting new ones
  (`ore_conduit_slack.recovery`).

The answer and its messages are `ore_conduit_slack.answer`'s.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Protocol

import structlog

from ore_conduit_slack.answer import Answer, Message, reply_metadata
from ore_conduit_slack.api import Ambiguous, Budget, SlackApi, SlackError
from ore_conduit_slack.config import SlackConfig
from ore_conduit_slack.ids import SlackThread, trace_id, traceparent_of
from ore_conduit_slack.inbound import Identity
from ore_conduit_slack.recovery import Recovery
from ore_conduit_slack.statuses import show_status
from ore_conduit_slack.text import fence_at, neutralise, split_parts
from ore_core import (
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
    ConduitClient,
    Delivery,
    classify,
    metrics,
    split_message,
    until_answered,
)
from ore_core.conduit.conversations import Conversations
from ore_core.conduit.copies import Copies, Copy
from ore_core.events import DeliveryEvent, ReactionEvent

__all__ = ["OUTPUT_KINDS", "Clock", "Rendering", "ThreadRenderer"]

log = structlog.get_logger("ore.conduit.slack")

OUTPUT_KINDS = frozenset(
    {"text_delta", "text", "turn_complete", "lifecycle", "error", "notice"}
    | {"properties", "turn_deleted", "delivery", "reaction"}  # bridging
)
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
_LANES = "slack-render"
_FINISHED = 4096  # answers remembered as finished, so repeats of their events are skipped


class Clock(Protocol):
    """Where the stream age is read from (`now()` in seconds)."""

    def now(self) -> float: ...


def _starts_an_answer(event: OutputEvent, sequence: int | None) -> bool:
    """Is `event` one an answer starts with, live (`lifecycle: submitted`, or a notice
    before it)? A delta or a stored event first means the answer's start was missed
    (this run began in its middle or after it)."""
    if sequence is not None:
        return False
    if isinstance(event, LifecycleEvent):
        return event.phase == "submitted"
    return isinstance(event, NoticeEvent)


class _Team:
    """What the conduit learnt about one workspace: budgets and whether it can stream."""

    def __init__(self, config: SlackConfig, now: Callable[[], float]) -> None:
        self.can_stream = config.streaming != "edit"
        self.updates = Budget(config.updates_per_minute / 60, 3, now)
        starts = config.stream_starts_per_minute
        self.starts = Budget(starts / 60, starts, now)


class Rendering:
    """What every thread's renderer shares: Slack, the settings, the workspaces' budgets,
    the answers being written, and the engine's copies (see the module docstring)."""

    def __init__(
        self,
        *,
        name: str,
        client: ConduitClient,
        api: SlackApi,
        config: SlackConfig,
        identity: Identity,
        clock: Clock,
        copies: Copies,
    ) -> None:
        self.name = name
        self.client = client
        self.api = api
        self.config = config
        self.identity = identity
        self.clock = clock
        self.copies = copies
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
        wanted = trace_id(traceparent_of(event_id))
        if any(trace_id(trace) == wanted for trace in self.active):
            return True
        return False if any(trace_id(trace) == wanted for trace in self.finished) else None

    def mark_finished(self, trace: str) -> None:
        self.finished[trace] = None
        while len(self.finished) > _FINISHED:
            self.finished.popitem(last=False)


class ThreadRenderer:
    """Renders one ore thread's events into its Slack thread, in order (its `Lane`)."""

    def __init__(self, outbound: Rendering, thread_id: str, conversations: Conversations) -> None:
        self.out = outbound
        self.api = outbound.api
        self.config = outbound.config
        self.thread_id = thread_id
        self.slack: SlackThread | None = None
        self.answers: dict[str, Answer] = {}
        self.last_sequence = 0  # the last stored batch of the thread handled
        self._recovery: Recovery | None = None
        self.conversations = conversations  # the engine's: a thread's Slack thread, settings

    @property
    def recovery(self) -> Recovery:
        """The reply record and the Slack thread's messages (once the Slack thread is known)."""
        assert self._recovery is not None
        return self._recovery

    # -- the lane ------------------------------------------------------------------

    async def open(self) -> None:
        """Find the Slack thread (and its reply record) before the first event."""
        key = await self.conversations.conversation_of(self.thread_id)
        self.slack = None if key is None else SlackThread.parse(key)
        if self.slack is not None:
            self._recovery = Recovery(self.out, self.thread_id, self.slack, self.answers)

    def busy(self) -> bool:
        """An answer is being written: the lane stays while it waits for its end."""
        return bool(self.answers)

    # -- events ------------------------------------------------------------------------

    async def handle(self, delivery: Delivery) -> None:
        """Render one event of the thread."""
        try:
            event = delivery.event
            if isinstance(event, PropertiesEvent):
                self.conversations.settings.update(self.thread_id, event)
            elif delivery.event.context.provenance != self.out.name:
                # Another endpoint's: delayed while the core is away, never dropped.
                await until_answered(
                    lambda: self._relay(delivery), "relay waits", thread_id=self.thread_id
                )
            else:
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
            answer = Answer(trace, user=event.context.user, after=self.last_sequence)
            self.answers[trace] = answer
            await self.recovery.recover(answer, sequence, fresh=_starts_an_answer(event, sequence))
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

    # -- bridging: another endpoint's messages on a linked thread -------------------

    async def _relay(self, delivery: Delivery) -> None:
        """Show another endpoint's event: a copy (the engine's `Copies`), a reaction
        (the bot's own, by `Copies.react`), a delivery status of a Slack message
        (`statuses`), a thread-wide notice."""
        if self.slack is None:
            return  # not a Slack thread
        event = delivery.event
        if delivery.sequence is None:  # live-only: never a copy, but the thread's notices
            if isinstance(event, NoticeEvent) and event.context.provenance == "app":
                await self._notice(event.content)
            return
        settings = self.conversations.settings.get(self.thread_id)
        relayed = classify(delivery, self.out.name, settings)
        if relayed.action in ("relayed", "edited", "deleted") or (
            relayed.action == "answer" and relayed.turn_id
        ):
            copy = Copy(self.thread_id, self.slack.key, delivery.sequence, relayed)
            await self.out.copies.show(copy)
        elif relayed.action == "reacted" and isinstance(event, ReactionEvent):
            copy = Copy(self.thread_id, self.slack.key, delivery.sequence, relayed)
            await self.out.copies.react(copy, event, lines=settings.reaction_lines)
        elif relayed.action == "delivery" and isinstance(event, DeliveryEvent):
            await show_status(self.out.client, self.api, self.thread_id, self.slack, event)

    async def _notice(self, text: str) -> None:
        """A thread-wide notice (a compaction's one line): live-only, so posted once; a
        refusal is logged, not retried (the thread's history holds what it says)."""
        assert self.slack is not None
        for part in split_message(neutralise(text), self.config.message_chars):
            try:
                await self.api.call(
                    "chat.postMessage",
                    self.slack.team,
                    channel=self.slack.channel,
                    thread_ts=self.slack.thread_ts,
                    markdown_text=part,
                )
            except (SlackError, Ambiguous) as exc:
                log.info("notice not shown", thread_id=self.thread_id, error=str(exc))
                return

    def _add_text(self, answer: Answer, event: ArtifactEvent) -> None:
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

    async def _status(self, answer: Answer, status: str) -> None:
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

    def due(self) -> float | None:
        """Seconds until an answer with pending text must be flushed (None: none pending)."""
        due: float | None = None
        now = self.api.now()
        for answer in self.answers.values():
            if answer.resumed or not self._pending(answer):
                continue
            wait = answer.flushed_at + self.config.flush_interval - now
            due = wait if due is None else min(due, wait)
        return due

    def _pending(self, answer: Answer) -> int:
        shown = answer.messages[-1].start + len(answer.messages[-1].shown) if answer.messages else 0
        fence = answer.messages[-1].fence if answer.messages else None
        prefix = 0 if fence is None else len(f"```{fence}\n")
        return len(neutralise(answer.raw)) - (shown - prefix)

    async def tick(self) -> None:
        """Flush the pending text of answers being streamed, where due."""
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

    async def _show(self, answer: Answer, text: str, *, final: bool) -> None:
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

    def _too_old(self, message: Message) -> bool:
        return message.streaming and (
            self.out.clock.now() - message.started_at >= self.config.stream_max_age
        )

    async def _open(
        self, answer: Answer, start: int, fence: str | None, text: str, *, final: bool = False
    ) -> None:
        """Start the answer's next message at `start` of `text`, showing what fits."""
        assert self.slack is not None
        prefix = "" if fence is None else f"```{fence}\n"
        parts = split_parts(text[start:], self.config.message_chars, open_fence=fence)
        content = parts[0].text if final else prefix + parts[0].body
        last = final and len(parts) == 1
        part = len(answer.messages)
        if answer.unrecorded and await self.recovery.adopt(answer, content, start, fence):
            return
        native = self._native(answer)
        started_at = self.out.clock.now()  # Slack counts a stream's age from its start call
        ts = await self._create(answer, part, content, native, last)
        if ts is None and native:  # the workspace cannot stream: post instead
            native = answer.native = False
            ts = await self._create(answer, part, content, native, last)
        assert ts is not None
        message = Message(ts, start, fence, content, streaming=native)
        message.tagged_last = last and not native
        message.started_at = started_at
        message.edited_at = self.api.now()
        answer.messages.append(message)
        await self.recovery.save(answer)

    def _native(self, answer: Answer) -> bool:
        """Stream this answer natively? Decided once per answer."""
        assert self.slack is not None
        if answer.native is None:
            team = self.out.team(self.slack.team)
            person = answer.user.startswith(("U", "W"))  # not a bot: streams address people
            recipient = person or self.slack.channel.startswith("D")
            answer.native = team.can_stream and recipient and team.starts.try_take()
        return answer.native

    async def _create(
        self, answer: Answer, part: int, content: str, native: bool, last: bool
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
                "metadata": reply_metadata(answer, part, last),
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
                found = await self.recovery.find_post(answer, part, content)
                if found is not None:
                    log.info("a post whose answer was lost was found", ts=found)
                    return found
        raise Ambiguous(method, "gave up after a lost response")

    async def _progress(self, answer: Answer, message: Message, target: str) -> None:
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
                await self.recovery.save(answer)
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

    async def _update(self, message: Message, text: str, metadata: Any = None) -> None:
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

    async def _close(self, answer: Answer, message: Message, text: str, last: bool = False) -> None:
        """Finish a message: it shows `text` for good."""
        assert self.slack is not None
        metadata = reply_metadata(answer, answer.messages.index(message), last)
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

    async def _finish(self, answer: Answer) -> None:
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
                try:
                    await self._show(answer, text, final=True)
                except (SlackError, Ambiguous):
                    metrics.delivery_failed(self.out.name)  # given up: logged by the lane
                    raise
                metrics.delivered(self.out.name)
                # Written: from now on deleting its message interrupts nothing.
                self.out.active.pop(answer.trace, None)
                self.out.mark_finished(answer.trace)
                await self._drop_extra(answer, text)
                await self.recovery.save(answer, final=True)
            await self._status(answer, "")
        finally:
            self.answers.pop(answer.trace, None)
            self.out.active.pop(answer.trace, None)
            self.out.mark_finished(answer.trace)

    def _consistent(self, answer: Answer, text: str) -> bool:
        """Do the closed messages still fit the final text (it continues where they end)?"""
        last = answer.messages[-1]
        return last.start <= len(text)

    def _rewrite(self, answer: Answer) -> None:
        """The final text does not fit the closed messages: restart from the first one."""
        answer.messages[1:] = []
        first = answer.messages[0]
        first.start, first.fence = 0, None

    async def _drop_extra(self, answer: Answer, text: str) -> None:
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
