"""Recovery: what an earlier run of the Slack conduit left of an answer, found again.

A conduit may be killed between a Slack call and the record of it. Each answer's
messages are kept in the ore thread's metadata (the reply record, `slack.reply`), so a
restarted conduit finishes the messages it had started instead of posting new ones:
those the record names, and those it made and died before recording (found in the Slack
thread: by their `ore_reply` metadata, or, for a native stream, which has none until it
is stopped, as the bot's message after the user's showing the start of the answer's
text). A post whose response was lost is found the same way instead of posted twice.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

import structlog

from ore_conduit_slack.answer import (
    UNKNOWN,
    Answer,
    Message,
    Posted,
    part_of,
    reply_payload,
)
from ore_conduit_slack.api import Ambiguous, SlackError
from ore_conduit_slack.ids import (
    REPLY_KEY,
    SlackThread,
    edit_event_id,
    trace_id,
    traceparent_of,
)
from ore_conduit_slack.ids import event_id as message_event_id
from ore_core import OreError
from ore_core.conduit import AnswerRecord, until_answered

if TYPE_CHECKING:
    from ore_conduit_slack.outbound import Rendering

__all__ = ["Listing", "Recovery", "ts_key"]

log = structlog.get_logger("ore.conduit.slack")

_R = TypeVar("_R")


def ts_key(ts: str) -> tuple[int, int]:
    """A Slack ts as a sortable pair (seconds, micro-part): later messages sort after."""
    seconds, _, fraction = ts.partition(".")
    try:
        return int(seconds), int(fraction or 0)
    except ValueError:
        return 0, 0


@dataclass
class Listing:
    """A Slack thread as `conversations.replies` lists it, oldest first."""

    posts: list[Posted] = field(default_factory=list)  # the bot's messages
    others: list[tuple[str, str]] = field(default_factory=list)  # (ts, ts of its last edit)

    def asked(self, trace: str, thread: SlackThread) -> str:
        """The ts of the message (of a person, or of an allowed bot) whose answer has
        `trace` ("" if it is not listed: deleted, say)."""
        for ts, edited in self.others:
            message_id = message_event_id(thread.enterprise, thread.team, thread.channel, ts)
            if trace_id(traceparent_of(message_id)) == trace_id(trace) or (
                edited
                and trace_id(traceparent_of(edit_event_id(message_id, edited))) == trace_id(trace)
            ):
                return ts
        return ""


class Recovery:
    """The reply record of one ore thread and the Slack thread's messages, for its renderer.

    `answers` is the renderer's own map of the answers it is writing (shared, not
    copied): a message one of them owns is never adopted by another.
    """

    def __init__(
        self, outbound: Rendering, thread_id: str, slack: SlackThread, answers: Mapping[str, Answer]
    ) -> None:
        self.out = outbound
        self.thread_id = thread_id
        self.slack = slack
        self.answers = answers

    async def recover(self, answer: Answer, sequence: int | None, *, fresh: bool) -> None:
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

    async def _read_record(self, answer: Answer, sequence: int | None) -> None:
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
        except OreError as exc:
            log.warning("cannot read the reply record", thread_id=self.thread_id, error=str(exc))
            return
        record = AnswerRecord.loads(info.metadata.get(REPLY_KEY))
        verdict = record.judge(answer.trace, sequence)
        if verdict == "shown":
            self.out.mark_finished(answer.trace)
            return
        if verdict == "new":
            answer.after = max(answer.after, record.upto)
            return
        answer.after = record.upto
        answer.messages = [Message.from_json(m) for m in record.messages]
        now = self.out.clock.now()
        for message in answer.messages:
            message.shown = UNKNOWN  # a stream is closed, then every message is rewritten
            # Its age is unknown: counted from now, not from 0 (which made it look too old
            # and closed it half-shown, the answer continued in a new message).
            message.started_at = now
        answer.resumed = bool(answer.messages)
        answer.native = bool(record.extra.get("native"))
        answer.status_set = True
        log.info("resuming an answer", thread_id=self.thread_id, messages=len(answer.messages))

    async def _find_unrecorded(self, answer: Answer) -> None:
        """Find the messages an earlier run made for this answer and died before
        recording; they are adopted where the answer needs its next message (`adopt`).

        A posted message says whose it is from the start (its metadata names the answer
        and part). A native stream carries no metadata until it is stopped
        (`chat.startStream` takes none), so one without metadata is a candidate only if it
        is the bot's, not known to any answer of this run, and after the user's message
        (or after the answer's last recorded message): it is adopted only if what it shows
        begins the text its part must show, so a person's message, another bot's, or
        another answer's are never touched. The answer is then held (rendered once done):
        only the complete text tells which stream is its.
        """
        listing = await self._thread_messages("check the thread for an answer's messages")
        if listing is None:
            return
        known = self._owned()
        asked = listing.asked(answer.trace, self.slack)
        since = answer.messages[-1].ts if answer.messages else asked
        found = [
            posted
            for posted in listing.posts
            if posted.ts not in known
            and (
                posted.payload.get("answer") == answer.key
                if posted.payload
                else bool(since and posted.text) and ts_key(posted.ts) > ts_key(since)
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

    def _owned(self) -> set[str]:
        """The ts of every message an answer of this run has."""
        return {m.ts for other in self.answers.values() for m in other.messages}

    async def adopt(self, answer: Answer, content: str, start: int, fence: str | None) -> bool:
        """Make the unrecorded message (`_find_unrecorded`) that is the answer's next part
        (which is to show `content`, from `start` of its text) that part; False if there is
        none. It is the one whose metadata names that part, or a stream without metadata,
        after the answer's last message, showing the start of `content`. It shows something
        unknown (it is rewritten when closed), and a stream is stopped first."""
        found = self._next_unrecorded(answer, content)
        if found is None:
            return False
        stream = not found.payload  # a stream that is live or that Slack ended
        message = Message(found.ts, start, fence, UNKNOWN, streaming=stream)
        message.started_at = self.out.clock.now()  # its age is unknown: counted from now
        if answer.native is None and not stream:
            answer.native = False
        answer.messages.append(message)
        log.info("adopting an unrecorded message", thread_id=self.thread_id, ts=found.ts)
        await self.save(answer)
        return True

    def _next_unrecorded(self, answer: Answer, content: str) -> Posted | None:
        part = len(answer.messages)
        after = ts_key(answer.messages[-1].ts) if answer.messages else (0, 0)
        taken = self._owned()
        for posted in answer.unrecorded:
            if posted.ts in taken or ts_key(posted.ts) <= after:
                continue
            if (
                part_of(posted.payload) == part
                if posted.payload
                else content.startswith(posted.text)
            ):
                answer.unrecorded.remove(posted)
                return posted
        return None

    async def save(self, answer: Answer, *, final: bool = False) -> None:
        """Keep the answer's messages in the ore thread's metadata (for a restart)."""
        text = AnswerRecord.of(
            answer.trace,
            [m.to_json() for m in answer.messages],
            final=final,
            sequence=answer.sequence,
            after=answer.after,
            native=bool(answer.native),
        ).dumps()
        try:
            await self._while_away(
                lambda: self.out.client.set_metadata(self.thread_id, REPLY_KEY, text),
                "save the reply record",
            )
        except OreError as exc:
            log.warning("cannot save the reply record", thread_id=self.thread_id, error=str(exc))

    async def _while_away(self, call: Callable[[], Awaitable[_R]], purpose: str) -> _R:
        """`call()`, tried again while the core is away: the reply record is what tells a
        restarted conduit an answer it showed from a new one, so rendering without it (or
        without saving it) would post an answer twice after a crash."""
        return await until_answered(
            call, f"core unreachable, waiting to {purpose}", thread_id=self.thread_id
        )

    async def find_post(self, answer: Answer, part: int, content: str) -> str | None:
        """The message the answer's part already is in the thread, if Slack has it (a
        post whose response was lost)."""
        listing = await self._thread_messages("check the thread for a lost post")
        known = {m.ts for m in answer.messages}
        for message in reversed(listing.posts if listing is not None else []):
            if message.ts in known:
                continue
            if message.payload.get("answer") == answer.key and part_of(message.payload) == part:
                return message.ts
            if not message.payload and message.text == content:
                return message.ts  # a stream: its metadata comes when it stops
        return None

    async def _thread_messages(self, purpose: str) -> Listing | None:
        """The bot's messages in the Slack thread, oldest first, with their `ore_reply`
        metadata payloads (and when the others were written); None when Slack could not
        be asked (logged with `purpose`)."""
        try:
            replies = await self.out.api.call(
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
        listing = Listing()
        for message in replies.get("messages") or []:
            ts = str(message["ts"])
            if message.get("bot_id") == self.out.identity.bot_id:
                text = str(message.get("text") or "")
                listing.posts.append(Posted(ts, text, reply_payload(message)))
            else:
                edited = message.get("edited") or {}
                listing.others.append((ts, str(edited.get("ts") or "")))
        return listing
