"""Collecting the finished answer to one message, for request-reply.

Every output event the core produces for a message carries that message's context,
and the bridge gives each message its own `traceparent` (a fresh span), so the events
of one message are exactly those carrying its traceparent, however many messages of
the thread are in flight. A message the core skips as a duplicate (a retried id) ends
with no turn of its own: its answer is then the one stored in the thread.
"""

from __future__ import annotations

from collections.abc import Sequence
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
)

__all__ = ["REPLY_KINDS", "Answer", "Progress"]

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
