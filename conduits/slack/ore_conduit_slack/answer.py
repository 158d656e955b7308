"""An answer as the Slack conduit renders it: its messages, and their `ore_reply` metadata.

An answer is every output event of one user message (they carry its traceparent); it
becomes one or more Slack messages in the thread, each tagged with Slack message
metadata `ore_reply` (answer, part, last) so that a later run can tell them apart.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ore_conduit_slack.ids import trace_id

__all__ = [
    "RELAY_EVENT",
    "UNKNOWN",
    "Answer",
    "Message",
    "Posted",
    "part_of",
    "reply_metadata",
    "relay_key",
    "reply_payload",
]

RELAY_EVENT = "ore_relay"
"""Slack message metadata event type of a relayed copy (payload: `{"key"}`, its part's
`part_key`)."""


def relay_key(message: dict[str, Any]) -> str:
    """The `ore_relay` key of a listed message ("" if it is no relayed copy)."""
    metadata = message.get("metadata") or {}
    payload = metadata.get("event_payload") if isinstance(metadata, dict) else None
    if metadata.get("event_type") != RELAY_EVENT or not isinstance(payload, dict):
        return ""
    return str(payload.get("key") or "")


METADATA_EVENT = "ore_reply"
UNKNOWN = "\x00"  # what a message of an earlier run shows: never equal to a text


@dataclass
class Message:
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
    def from_json(cls, data: list[Any]) -> Message:
        return cls(str(data[0]), int(data[1]), data[2], streaming=bool(data[3]))


@dataclass(frozen=True)
class Posted:
    """One of the bot's messages in a Slack thread, as `conversations.replies` lists it."""

    ts: str
    text: str
    payload: dict[str, Any]  # its `ore_reply` metadata payload ({}: none, e.g. a live stream)


@dataclass
class Answer:
    """The answer to one user message, as far as it is known."""

    trace: str
    user: str = ""
    raw: str = ""  # the streamed text (deltas; text artifacts joined once complete)
    texts: list[str] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)
    error: str | None = None
    cancelled: bool = False
    messages: list[Message] = field(default_factory=list)
    native: bool | None = None  # None: not decided yet
    resumed: bool = False  # started by an earlier run of the conduit (rendered once done)
    unrecorded: list[Posted] = field(default_factory=list)  # an earlier run's, to adopt
    after: int = 0  # the thread's last stored batch handled before this answer began
    sequence: int = 0  # the last stored batch of this answer handled
    status_set: bool = False
    piece_done: bool = False
    flushed_at: float = float("-inf")

    @property
    def key(self) -> str:
        """The answer's id in Slack message metadata (the trace id)."""
        return trace_id(self.trace)


def reply_metadata(answer: Answer, part: int, last: bool = False) -> dict[str, Any]:
    """The Slack message metadata of the answer's message number `part`."""
    payload: dict[str, Any] = {"answer": answer.key, "part": part}
    if last:
        payload["last"] = True
    return {"event_type": METADATA_EVENT, "event_payload": payload}


def reply_payload(message: dict[str, Any]) -> dict[str, Any]:
    """The `ore_reply` metadata payload of a listed message ({} if it has none)."""
    metadata = message.get("metadata") or {}
    if metadata.get("event_type") != METADATA_EVENT:
        return {}
    payload = metadata.get("event_payload")
    return dict(payload) if isinstance(payload, dict) else {}


def part_of(payload: dict[str, Any]) -> int:
    """The part number an `ore_reply` payload names (-1: none)."""
    try:
        return int(payload.get("part", -1))
    except (TypeError, ValueError):
        return -1
