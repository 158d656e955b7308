"""The adapter contract: what a platform writes when the SDK is the engine (issue 36).

A platform conduit has two halves. The adapter (`Platform`) knows one platform's wire:
it turns the platform's events into `Inbound` values in ore's words, and performs the
few calls the engine asks of it (post, edit, delete one message part; react, where the
platform has reactions: `Reacts`; "typing" where it shows it: `Types`), classifying
every failure once as `Transient`, `RateLimited` or `Refused`. The engine
(`PlatformConduit`) owns everything between: the order of a conversation's events,
confirming a platform event only after the core stored it, streaming answers,
relayed copies and their delivery reports, and the one retry policy. So a new platform
is its wire, its ids and its formatting, and every platform keeps the same promises.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import ClassVar, Literal, Protocol, runtime_checkable

from ore_core.artifacts import Attachment
from ore_core.conduit.capabilities import Capabilities
from ore_core.events import FailureReason

__all__ = [
    "Command",
    "Delete",
    "Drafts",
    "Edit",
    "FailureReason",
    "Inbound",
    "Message",
    "Part",
    "PartKind",
    "Platform",
    "PlatformError",
    "RateLimited",
    "Reaction",
    "Reacts",
    "ReadsBack",
    "Refused",
    "Sender",
    "Transient",
    "Types",
    "part_key",
]

KEY_LENGTH = 25
"""Discord's `nonce` takes at most 25 characters, the tightest of the platforms' keys."""


def part_key(turn_id: str, part: int) -> str:
    """The idempotency key of part `part` of what the engine shows for `turn_id`: the
    same turn and part give the same key in every process, so a send repeated after a
    crash is recognised (Discord's nonce, Matrix's txnId, NATS's `Nats-Msg-Id`)."""
    digest = hashlib.sha256(f"{turn_id}.{part}".encode()).digest()
    return base64.b32encode(digest).decode().lower()[:KEY_LENGTH]


async def _nothing() -> None:
    return None


@dataclass(frozen=True, slots=True)
class Sender:
    """Who wrote a message: a display name (never a bare user id), the platform's id of
    the user (for mentions and allow lists), an avatar URL when the platform has one."""

    name: str
    id: str = ""
    avatar: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Inbound:
    """One platform event, in ore's words.

    `conversation`: the value of the conduit's `conversation_key` for where it happened
    (a channel thread, a DM, a room). `platform_id`: the platform's id of this event,
    used as the ore event id, so a platform's retry is stored once. `done`: the engine
    awaits it once the core acknowledged the event, never before (an update offset, an
    envelope ack, a sync token), so a crash before that gets the event again.
    """

    conversation: str
    platform_id: str
    done: Callable[[], Awaitable[None]] = field(default=_nothing, compare=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class Message(Inbound):
    """A user's message; `reply_to` is the platform id of the message it answers,
    `attachments` the files it carries, already in ore's files bucket
    (`ConduitClient.upload`)."""

    sender: Sender
    text: str
    reply_to: str = ""
    attachments: tuple[Attachment, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Edit(Inbound):
    """A user changed message `target` to `text` (`platform_id` names this edit, so two
    edits of one message are two events)."""

    sender: Sender
    target: str
    text: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Delete(Inbound):
    """A user removed message `target`."""

    target: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Reaction(Inbound):
    """A user added (or, `removed`, took back) `emoji` on message `target`."""

    sender: Sender
    target: str
    emoji: str
    removed: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class Command(Inbound):
    """A command given through the platform's own gesture (a slash command, a menu):
    `name` without its slash, `args` as typed. Commands typed as text arrive as
    `Message`s; the core reads them."""

    sender: Sender
    name: str
    args: str = ""


PartKind = Literal["text", "error", "notice"]
"""What a part is: answer or copy text, an error of the core, or a notice (with its
severity); an adapter shows an error or a notice its own way (a prefix, a colour)."""


@dataclass(frozen=True, slots=True)
class Part:
    """One platform message's worth of what the engine shows: text already in the
    platform's markup and at most its `max_message_length`; `reply_to` a platform id to
    thread under; `sender` the author a relayed copy shows (a webhook's name and
    avatar), None for the bot's own answers. `kind` and `severity` (a notice's:
    "info", "warn"...) say what it is. `repeat`: this post may have been made before,
    by a run killed before it could record it (a platform without keys marks it).
    `attachments`: the files a relayed message carries (on its last part), by reference."""

    text: str
    reply_to: str = ""
    sender: Sender | None = None
    kind: PartKind = "text"
    severity: str = ""
    repeat: bool = False
    attachments: tuple[Attachment, ...] = ()


class PlatformError(Exception):
    """A platform call that failed, classified by the adapter once."""

    reason: FailureReason = "platform_unavailable"

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class Transient(PlatformError):
    """The platform could not answer now (a 5xx, a reset connection): the engine
    retries with its backoff until the copy's deadline."""


class RateLimited(PlatformError):
    """The platform asked to wait `wait` seconds: the engine waits exactly that long,
    for this conversation only, and reports `retrying` with reason `rate_limited` once."""

    reason: FailureReason = "rate_limited"

    def __init__(self, detail: str, wait: float) -> None:
        super().__init__(detail)
        self.wait = wait


class Refused(PlatformError):
    """The platform will never accept this call: reported `failed` with `reason`,
    never retried."""

    def __init__(self, detail: str, reason: FailureReason) -> None:
        super().__init__(detail)
        self.reason = reason


class Platform(Protocol):
    """What a platform's adapter implements; the engine does the rest.

    `connect` logs in (a bad token raises an OreError that says so), `events` yields
    the platform's events until `close`. `post` returns the new message's platform id;
    `key` is `part_key(turn, part)`, passed to the platform where it takes one, so a
    repeated post after a crash makes no second message. Every failure is raised as a
    `PlatformError` subclass.
    """

    capabilities: ClassVar[Capabilities]

    async def connect(self) -> None: ...

    async def close(self) -> None: ...

    def events(self) -> AsyncIterator[Inbound]: ...

    async def post(self, conversation: str, part: Part, key: str) -> str: ...

    async def edit(self, conversation: str, platform_id: str, part: Part) -> None: ...

    async def delete(self, conversation: str, platform_id: str) -> None: ...


@runtime_checkable
class Reacts(Protocol):
    """A platform with reactions (`Capabilities.reactions`): the bot adds (`add`) or
    takes back its own `emoji` on message `platform_id`, showing there a reaction made
    on another endpoint. Both are idempotent: adding twice shows one, taking back one
    the bot never made does nothing. Optional: without it, a reaction elsewhere is
    shown as a short line, and only where the gateway asks for it."""

    async def react(self, conversation: str, platform_id: str, emoji: str, add: bool) -> None: ...


@runtime_checkable
class Types(Protocol):
    """A platform that shows that the bot is writing (Telegram's chat action, Discord's
    typing): `typing` shows it for a few seconds, and the engine calls it again every
    `TYPING_EVERY` seconds while an answer of the conversation runs. Optional."""

    async def typing(self, conversation: str) -> None: ...


@runtime_checkable
class Drafts(Protocol):
    """A platform that shows an answer being written as a draft (Telegram's
    `sendMessageDraft`) instead of a message edited as it grows. `drafts(conversation)`
    says whether it can there (a private chat); `draft` shows the text so far under
    `draft_id` (one per answer); the finished answer is posted as messages. A draft
    refused (a `PlatformError`) makes that answer stream by edits. Optional."""

    def drafts(self, conversation: str) -> bool: ...

    async def draft(self, conversation: str, draft_id: str, text: str) -> None: ...


@runtime_checkable
class ReadsBack(Protocol):
    """A platform without idempotency keys that can find what it posted: after a crash
    the engine asks whether the post of `key` landed before it posts again."""

    async def find(self, conversation: str, key: str) -> str | None: ...
