"""The fake homeserver's state: one event stream, rooms with their state, and what a
user sees. No HTTP here (that is `fake.py`), so the model reads as the spec's.

Every event (message, state, redaction) gets the next position of one stream; a sync
token is `s<position>`, so "what happened since" is a slice. A room's state is the
latest state event of each (type, state_key). Redacting an event strips its content
(as the server's copy is stripped) and marks it `redacted_because`.
"""

from __future__ import annotations

import itertools
import re
import time
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Event", "Room", "Shown", "Stream", "display_name", "plain"]

_TAGS = re.compile(r"<[^>]+>")


@dataclass
class Event:
    """One event as the server keeps it; `position` orders it in the one stream."""

    position: int
    room_id: str
    type: str
    sender: str
    content: dict[str, Any]
    state_key: str | None = None
    redacted_by: str = ""
    txn: tuple[str, str] | None = None  # (access token, txnId) of the send, if any
    replays: str = ""  # the event id of the event this entry hands over again

    @property
    def event_id(self) -> str:
        return self.replays or f"${self.position}"

    def to_json(self, token: str = "") -> dict[str, Any]:
        """The event as /sync carries it; its sender's own token sees the txnId."""
        data: dict[str, Any] = {
            "event_id": self.event_id,
            "type": self.type,
            "sender": self.sender,
            "origin_server_ts": int(time.time() * 1000),
            "content": {} if self.redacted_by else dict(self.content),
        }
        if self.state_key is not None:
            data["state_key"] = self.state_key
        if self.type == "m.room.redaction":
            data["redacts"] = self.content["redacts"]
        unsigned: dict[str, Any] = {}
        if self.redacted_by:
            unsigned["redacted_because"] = {"event_id": self.redacted_by}
        if self.txn is not None and self.txn[0] == token:
            unsigned["transaction_id"] = self.txn[1]
        if unsigned:
            data["unsigned"] = unsigned
        return data

    @property
    def relation(self) -> dict[str, Any]:
        relates: dict[str, Any] = self.content.get("m.relates_to") or {}
        return relates


@dataclass(frozen=True)
class Shown:
    """One message as a user's client shows it: the latest edit by its sender applied."""

    event_id: str
    sender: str
    text: str
    html: str
    reply_to: str
    thread: str
    edits: int


@dataclass
class Room:
    """A room: its id and the latest state event per (type, state_key)."""

    room_id: str
    state: dict[tuple[str, str], Event] = field(default_factory=dict)
    forbidden: set[str] = field(default_factory=set)  # users whose sends are refused

    def membership(self, user: str) -> str:
        event = self.state.get(("m.room.member", user))
        return str(event.content.get("membership", "leave")) if event else "leave"

    @property
    def encrypted(self) -> bool:
        return ("m.room.encryption", "") in self.state


class Stream:
    """Every event of every room, in order (see the module docstring)."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.rooms: dict[str, Room] = {}
        self._messages: dict[str, list[Event]] = {}  # room -> its m.room.message events
        self._room_ids = itertools.count(1)

    @property
    def position(self) -> int:
        return len(self.events)

    def new_room(self, creator: str, server: str, name: str = "") -> Room:
        room = Room(f"!{name or f'room{next(self._room_ids)}'}:{server}")
        self.rooms[room.room_id] = room
        self.add(room, "m.room.create", creator, {"creator": creator}, state_key="")
        member = {"membership": "join", "displayname": display_name(creator)}
        self.add(room, "m.room.member", creator, member, state_key=creator)
        return room

    def add(
        self,
        room: Room,
        type_: str,
        sender: str,
        content: dict[str, Any],
        *,
        state_key: str | None = None,
        txn: tuple[str, str] | None = None,
    ) -> Event:
        """Append an event (and apply it: state, a redaction)."""
        event = Event(len(self.events) + 1, room.room_id, type_, sender, content, state_key)
        event.txn = txn
        self._append(event)
        if state_key is not None:
            room.state[(type_, state_key)] = event
        if type_ == "m.room.redaction":
            target = self.find(str(content["redacts"]))
            if target is not None and target.room_id == room.room_id:
                target.redacted_by = event.event_id
        return event

    def replay(self, event_id: str) -> None:
        """Hand `event_id` over again, as a homeserver does to a client that syncs
        from an older token (the same event id, once more in the stream)."""
        event = self.find(event_id)
        assert event is not None, f"no event {event_id}"
        again = Event(len(self.events) + 1, event.room_id, event.type, event.sender, event.content)
        again.replays = event.event_id
        self._append(again)

    def _append(self, event: Event) -> None:
        self.events.append(event)
        if event.type == "m.room.message":
            self._messages.setdefault(event.room_id, []).append(event)

    def find(self, event_id: str) -> Event | None:
        if not event_id.startswith("$") or not event_id[1:].isdigit():
            return None
        position = int(event_id[1:])
        return self.events[position - 1] if 0 < position <= len(self.events) else None

    def since(self, position: int) -> list[Event]:
        return self.events[position:]

    def view(self, room_id: str, thread: str | None = None) -> list[Shown]:
        """The room's messages as its members see them: edits (m.replace by the same
        sender) applied, redacted ones gone; `thread` a root: that thread's messages
        after the root; None: the main timeline (thread replies left out)."""
        messages = self._messages.get(room_id, [])
        edits: dict[str, list[Event]] = {}
        for event in messages:
            if event.relation.get("rel_type") == "m.replace" and not event.redacted_by:
                edits.setdefault(str(event.relation.get("event_id")), []).append(event)
        shown = []
        for event in messages:
            if event.replays or event.redacted_by or event.relation.get("rel_type") == "m.replace":
                continue
            in_thread = (
                str(event.relation.get("event_id", ""))
                if event.relation.get("rel_type") == "m.thread"
                else ""
            )
            if (thread or "") != in_thread:
                continue
            own = [e for e in edits.get(event.event_id, []) if e.sender == event.sender]
            content = own[-1].content.get("m.new_content", {}) if own else event.content
            reply = event.relation.get("m.in_reply_to") or {}
            shown.append(
                Shown(
                    event.event_id,
                    event.sender,
                    str(content.get("body", "")),
                    str(content.get("formatted_body", "")),
                    str(reply.get("event_id", "")),
                    in_thread,
                    len(own),
                )
            )
        return shown


def display_name(user: str) -> str:
    """The display name the fake gives a user: `@alice:server` is Alice."""
    return user.split(":")[0][1:].title()


def plain(html: str) -> str:
    """HTML with its tags removed (what a client without HTML shows)."""
    return _TAGS.sub("", html)
