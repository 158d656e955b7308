"""Reading: one timeline event of a room in ore's words (`Message`, `Edit`, `Delete`,
`Command`, `Reaction`: an `m.reaction` annotation, and its redaction a reaction taken
back), or nothing for what the conduit does not answer.

Not answered: the bot's own events, notices (`m.notice`: bots must never answer them,
so two bots never loop), redacted events, state and encrypted events. A file
(`m.image`, `m.file`, `m.audio`, `m.video`) is a message with its caption as text. A reply's
quoted fallback (`> <@user> ...` lines older clients put first) is taken off. An edit
or a redaction names only its target: its conversation is the target's, from the
state, else (an edit of a message seen before the state knew it) from the target
event itself, else the room's.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from ore_conduit_matrix.ids import Conversation
from ore_conduit_matrix.state import State
from ore_core.conduit import Command, Delete, Edit, Inbound, Message, Reaction, Sender

__all__ = ["Reader"]

_TEXT = frozenset({"m.text", "m.emote"})
MEDIA = frozenset({"m.image", "m.file", "m.audio", "m.video"})
"""A file's message types: read as a `Message` whose text is the caption (the
platform takes the file itself into ore)."""


@dataclass
class Reader:
    """Reads the events of the bot `me`; `name(room, user)` is a display name,
    `fetch(room, event_id)` an event's content (None when it cannot be had)."""

    me: str
    prefix: str
    state: State
    name: Callable[[str, str], str]
    fetch: Callable[[str, str], Awaitable[dict[str, Any] | None]]

    async def read(self, room: str, event: dict[str, Any]) -> Inbound | None:
        sender = str(event.get("sender", ""))
        content = event.get("content") or {}
        if sender == self.me or not content:
            return None
        event_id = str(event.get("event_id", ""))
        if event.get("type") == "m.room.redaction":
            target = str(event.get("redacts") or content.get("redacts", ""))
            reaction = self.state.reaction(target)
            if reaction is not None:  # a reaction taken back
                return await self._reaction(room, event_id, sender, *reaction, removed=True)
            where = await self._where(room, target, fetch=False)
            return Delete(conversation=where, platform_id=event_id, target=target)
        if event.get("type") == "m.reaction":
            relates = content.get("m.relates_to") or {}
            if relates.get("rel_type") != "m.annotation" or not relates.get("key"):
                return None
            target, key = str(relates.get("event_id", "")), str(relates["key"])
            self.state.note_reaction(event_id, target, key)
            return await self._reaction(room, event_id, sender, target, key, removed=False)
        if event.get("type") != "m.room.message" or content.get("msgtype") not in _TEXT | MEDIA:
            return None
        who = Sender(self.name(room, sender), sender)
        relates = content.get("m.relates_to") or {}
        if relates.get("rel_type") == "m.replace":
            target = str(relates.get("event_id", ""))
            text = str((content.get("m.new_content") or {}).get("body", ""))
            where = await self._where(room, target, fetch=True)
            return Edit(
                conversation=where, platform_id=event_id, sender=who, target=target, text=text
            )
        conversation = Conversation.of(room, content).key
        self.state.note(event_id, conversation)
        reply = "" if relates.get("is_falling_back") else _reply_to(relates)
        text = _without_fallback(_text_of(content), reply)
        command = self._command(text)
        if command is not None:
            name, args = command
            return Command(
                conversation=conversation, platform_id=event_id, sender=who, name=name, args=args
            )
        return Message(
            conversation=conversation, platform_id=event_id, sender=who, text=text, reply_to=reply
        )

    async def _reaction(
        self, room: str, event_id: str, sender: str, target: str, key: str, *, removed: bool
    ) -> Reaction:
        return Reaction(
            conversation=await self._where(room, target, fetch=True),
            platform_id=event_id,
            sender=Sender(self.name(room, sender), sender),
            target=target,
            emoji=key,
            removed=removed,
        )

    def _command(self, text: str) -> tuple[str, str] | None:
        if not text.startswith(self.prefix):
            return None
        name, _, args = text[len(self.prefix) :].partition(" ")
        return (name.lower(), args.strip()) if name.isalnum() else None

    async def _where(self, room: str, target: str, *, fetch: bool) -> str:
        known = self.state.conversation_of(target)
        if known is not None:
            return known
        content = await self.fetch(room, target) if fetch else None
        return Conversation.of(room, content or {}).key


def _text_of(content: dict[str, Any]) -> str:
    """A message's text: a file's `body` is its caption only where `filename` names
    the file (else the body is the file's name, no text)."""
    body = str(content.get("body", ""))
    if content.get("msgtype") in MEDIA:
        return body if content.get("filename") not in (None, body) else ""
    return body


def _reply_to(relates: dict[str, Any]) -> str:
    reply = relates.get("m.in_reply_to")
    return str(reply.get("event_id", "")) if isinstance(reply, dict) else ""


def _without_fallback(body: str, reply_to: str) -> str:
    """`body` without the quoted lines a reply's fallback puts first."""
    if not reply_to or not body.startswith("> "):
        return body
    lines = body.split("\n")
    while lines and lines[0].startswith(">"):
        lines.pop(0)
    return "\n".join(lines).lstrip("\n")
