"""Names derived from Slack ids: ore event ids, thread keys, trace ids.

The ore event id of a Slack message is `slack:{enterprise or -}:{team}:{channel}:{ts}`.
Its `ts` is the same on every retry and in both `app_mention` and `message` events, so
every delivery of one message carries one id and the core stores it once. The
traceparent of a message is derived from its event id, so the output events of its
answer (which carry it) can be tied back to the message after a restart, with no state.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

__all__ = [
    "CHANNEL_KEY",
    "REPLY_KEY",
    "TEAM_KEY",
    "THREAD_KEY",
    "THREAD_TS_KEY",
    "SlackThread",
    "edit_event_id",
    "event_id",
    "message_of",
    "trace_id",
    "traceparent_of",
]

THREAD_KEY = "slack.thread"
"""The thread metadata key looked up for a Slack thread (value: `SlackThread.key`)."""
TEAM_KEY = "slack.team"
CHANNEL_KEY = "slack.channel"
THREAD_TS_KEY = "slack.thread_ts"
REPLY_KEY = "slack.reply"
"""Where the conduit keeps the Slack messages of the answer being written (JSON)."""


@dataclass(frozen=True, slots=True)
class SlackThread:
    """A Slack thread: where a conversation lives and every reply goes."""

    enterprise: str  # "" outside Enterprise Grid
    team: str
    channel: str
    thread_ts: str  # the root message's ts

    @property
    def key(self) -> str:
        """The value of `THREAD_KEY` for this thread."""
        return f"{self.enterprise or '-'}:{self.team}:{self.channel}:{self.thread_ts}"

    def metadata(self) -> dict[str, str]:
        """The ore thread metadata that says where to answer."""
        return {
            TEAM_KEY: self.team,
            CHANNEL_KEY: self.channel,
            THREAD_TS_KEY: self.thread_ts,
            "slack.enterprise": self.enterprise,
        }

    @classmethod
    def parse(cls, key: str) -> SlackThread:
        """The Slack thread a `key` names (ValueError if it names none)."""
        found = cls.from_metadata({THREAD_KEY: key})
        if found is None:
            raise ValueError(f"not a Slack thread key: {key!r}")
        return found

    @classmethod
    def from_metadata(cls, metadata: dict[str, str]) -> SlackThread | None:
        """The Slack thread of an ore thread, or None for a thread of another conduit.

        A thread made elsewhere and linked to a Slack thread has only `slack.thread` (the
        core shows the endpoint's key in `threads.get`): its value says it all.
        """
        if not all(key in metadata for key in (TEAM_KEY, CHANNEL_KEY, THREAD_TS_KEY)):
            parts = metadata.get(THREAD_KEY, "").split(":")
            if len(parts) != 4 or not all(parts):
                return None
            enterprise, team, channel, thread_ts = parts
            return cls("" if enterprise == "-" else enterprise, team, channel, thread_ts)
        return cls(
            metadata.get("slack.enterprise", ""),
            metadata[TEAM_KEY],
            metadata[CHANNEL_KEY],
            metadata[THREAD_TS_KEY],
        )


def event_id(enterprise: str, team: str, channel: str, ts: str) -> str:
    """The ore event id of the Slack message `ts` in `channel`."""
    return f"slack:{enterprise or '-'}:{team}:{channel}:{ts}"


def message_of(event_id: str) -> tuple[str, str] | None:
    """(channel, ts) of the Slack message an ore event id names (an edit's: the edited
    message); None for an id that is not a Slack message's."""
    parts = event_id.split(":")
    if len(parts) < 5 or parts[0] != "slack":
        return None
    return parts[3], parts[4]


def edit_event_id(message_id: str, edited_ts: str) -> str:
    """The ore event id of one edit of a message (a new branch of its thread)."""
    return f"{message_id}:edit:{edited_ts}"


def trace_id(traceparent: str) -> str:
    """The trace id of a traceparent (the conduit's span of a message keeps it)."""
    parts = traceparent.split("-")
    return parts[1] if len(parts) >= 4 else traceparent


def traceparent_of(message_id: str) -> str:
    """A W3C traceparent (not sampled) that is a function of the event id alone."""
    digest = hashlib.sha256(message_id.encode()).hexdigest()
    return f"00-{digest[:32]}-{digest[32:48]}-00"
