"""How a Matrix conversation is named: a room's main timeline, or one `m.thread` in it.

The conduit's conversation key (`matrix.conversation`) is the room id for the room's
main timeline (`!abc:example.org`) and the room id, `|` and the thread's root event id
for a thread (`!abc:example.org|$root`): neither id contains `|`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["CONVERSATION_KEY", "Conversation"]

CONVERSATION_KEY = "matrix.conversation"
_SEPARATOR = "|"


@dataclass(frozen=True, slots=True)
class Conversation:
    """A room, and the root of the thread in it (empty: the main timeline)."""

    room: str
    thread: str = ""

    @property
    def key(self) -> str:
        return f"{self.room}{_SEPARATOR}{self.thread}" if self.thread else self.room

    @classmethod
    def parse(cls, key: str) -> Conversation:
        room, _, thread = key.partition(_SEPARATOR)
        return cls(room, thread)

    @classmethod
    def of(cls, room: str, content: dict[str, Any]) -> Conversation:
        """Where a message with this content is: its thread's, else the room's."""
        relates = content.get("m.relates_to")
        if isinstance(relates, dict) and relates.get("rel_type") == "m.thread":
            return cls(room, str(relates.get("event_id", "")))
        return cls(room)
