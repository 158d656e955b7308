"""Names derived from Telegram ids: ore event ids, conversation keys, trace ids.

A message's ore event id is `telegram:{chat}:{message_id}`: the same however often
Telegram hands the update over (after a crash, getUpdates returns what was not confirmed),
so the core stores it once. An edit's id adds the update id of the edit. The traceparent
of a message is a function of its event id, so an answer's output events (which carry
it) lead back to the message with no state.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

__all__ = [
    "KIND_KEY",
    "THREAD_KEY",
    "Conversation",
    "edit_event_id",
    "event_id",
    "traceparent_of",
]

THREAD_KEY = "telegram.thread"
"""The thread metadata key looked up for a conversation (value: `Conversation.key`)."""
KIND_KEY = "telegram.chat_type"
"""Where threads of earlier versions kept the chat's type."""


@dataclass(frozen=True, slots=True)
class Conversation:
    """One conversation: a chat, its topic (0: none, or the General topic) and the
    message that started it (`root`: "0" for the chat's first conversation)."""

    chat: int
    topic: int
    root: str
    kind: str = "private"

    @property
    def key(self) -> str:
        """The value of `THREAD_KEY`."""
        return f"{self.chat}:{self.topic}:{self.root}"

    @classmethod
    def from_metadata(cls, metadata: dict[str, str]) -> Conversation | None:
        """The conversation of an ore thread; None for a thread that is not Telegram's."""
        try:
            chat, topic, root = metadata[THREAD_KEY].split(":", 2)
            # A linked endpoint's key comes without the kind: only private chats have
            # positive ids (groups' are negative), and only they take drafts.
            kind = metadata.get(KIND_KEY) or ("private" if int(chat) > 0 else "group")
            return cls(int(chat), int(topic), root, kind)
        except (KeyError, ValueError):
            return None


def event_id(chat: int, message_id: int) -> str:
    """The ore event id of message `message_id` of `chat`."""
    return f"telegram:{chat}:{message_id}"


def edit_event_id(chat: int, message_id: int, update_id: int) -> str:
    """The ore event id of one edit (the update that reported it) of a message."""
    return f"{event_id(chat, message_id)}:edit:{update_id}"


def traceparent_of(message_id: str) -> str:
    """A W3C traceparent (not sampled) that is a function of the event id alone."""
    digest = hashlib.sha256(message_id.encode()).hexdigest()
    return f"00-{digest[:32]}-{digest[32:48]}-00"
