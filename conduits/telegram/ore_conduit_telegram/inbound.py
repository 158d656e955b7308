"""Inbound: Telegram updates -> ore user messages, branches and local replies.

`Inbound.take(update)` handles one update and returns once its work is done: the
message is sent to the core and acknowledged (JetStream), or found to need nothing.
Only then is the update confirmed to Telegram (the poller's next `offset`, or the
webhook's 200), so a conduit killed at any moment gets the update again and sends it
again with the same event id: the core stores it once. Work waits and tries again while
the core or NATS is away, for as long as it takes. Updates of one chat (and topic) are
handled in order; chats are handled concurrently.

- Answered: every message of a private chat; in groups, messages addressed to the bot
  (a mention, a command, a reply to the bot) or all (`groups = "all"`).
- Ignored: the bot's own messages, other bots (unless `allow_bots`), service messages.
- Conversations: a private chat (or forum topic) is one conversation until `/new`
  starts another. In groups a reply continues the conversation of the message it
  replies to (a reply chain is a thread); another message continues the chat's
  current conversation, and `/new` starts a new one.
- Commands: `/start` is answered with the greeting and `/new` with a confirmation, by
  the conduit; `/stop` interrupts the answer being written; `/retry` asks for another
  answer (a core regenerate) to the question of the answer it replies to, or else to
  the conversation's latest question; every other command (`/help`, ...) goes to the
  core as text, without the `@botname` Telegram adds in groups.
- Edits of the latest message of a conversation branch the ore thread (`on_edit`); the
  new message names the turn it replaces (`edit_of`), so linked endpoints edit their copy.
- Every message carries the sender's display name (`user_name`), which linked endpoints
  label it with; the conversation of a thread linked here from another conduit is
  recorded in the state, for the renderer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import structlog

from ore_conduit_telegram.api import BotApi
from ore_conduit_telegram.config import TelegramConfig
from ore_conduit_telegram.ids import (
    THREAD_KEY,
    Conversation,
    edit_event_id,
    event_id,
    traceparent_of,
)
from ore_conduit_telegram.media import MediaReader, file_kinds
from ore_conduit_telegram.outbound import Notes
from ore_conduit_telegram.platform import platform_id
from ore_conduit_telegram.state import State
from ore_core import (
    ApiError,
    BusError,
    EventContext,
    OreError,
    PermissionDenied,
    Role,
    UserMessageEvent,
)
from ore_core.conduit import ConduitClient, until_answered
from ore_core.conduit.pacing import passes

__all__ = ["Identity", "Inbound"]

log = structlog.get_logger("ore.conduit.telegram")

_COMMANDS = ("/start", "/new", "/stop", "/retry")
NOTHING_TO_RETRY = "Nothing to answer again yet."
NOT_AN_ANSWER = "That message is not one of my answers: reply /retry to an answer."
NEW_CONVERSATION = "New conversation started."
TOO_LARGE_FOR_BUS = (
    "I did not read the image: it is too large for ore's message limit (lower "
    "max_image_bytes or raise nats.max_payload)."
)


@dataclass(frozen=True, slots=True)
class Identity:
    """Who the bot is, from `getMe` at start."""

    id: int
    username: str


def _passing(error: BaseException) -> bool:
    """Does `error` pass with time (the core or NATS away, the core failing)?"""
    if isinstance(error, BusError):
        return not isinstance(error, PermissionDenied)
    if isinstance(error, ApiError):
        return error.status >= 500
    return False


@dataclass
class _Lane:
    """The updates of one chat (and topic) run one at a time, in arrival order (the
    lock is fair); forgotten once none is waiting."""

    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0


@dataclass(frozen=True, slots=True)
class _Message:
    """The parts of a Telegram message the conduit reads."""

    chat: int
    kind: str
    topic: int
    message_id: int
    sender: int
    sender_is_bot: bool
    sender_name: str  # the display name linked endpoints label the message with
    text: str
    reply_to: int
    reply_to_sender: int
    files: Mapping[str, Any] = field(default_factory=dict)  # photo, document, sticker, ...

    @classmethod
    def of(cls, data: Mapping[str, Any]) -> _Message | None:
        chat = data.get("chat")
        sender = data.get("from")
        if not isinstance(chat, Mapping) or not isinstance(sender, Mapping):
            return None
        reply = data.get("reply_to_message")
        reply = reply if isinstance(reply, Mapping) else {}
        replier = reply.get("from")
        replier = replier if isinstance(replier, Mapping) else {}
        try:
            return cls(
                chat=int(chat["id"]),
                kind=str(chat.get("type") or "private"),
                topic=int(data.get("message_thread_id") or 0)
                if data.get("is_topic_message")
                else 0,
                message_id=int(data["message_id"]),
                sender=int(sender["id"]),
                sender_is_bot=bool(sender.get("is_bot")),
                sender_name=_display_name(sender),
                text=str(data.get("text") or data.get("caption") or ""),
                reply_to=int(reply.get("message_id") or 0),
                reply_to_sender=int(replier.get("id") or 0),
                files=file_kinds(data),
            )
        except (KeyError, TypeError, ValueError):
            return None

    @property
    def private(self) -> bool:
        return self.kind == "private"

    @property
    def has_file(self) -> bool:
        return bool(self.files)


def _display_name(sender: Mapping[str, Any]) -> str:
    """A Telegram user's name as people see it: first and last name, else the username."""
    name = " ".join(str(sender.get(k) or "").strip() for k in ("first_name", "last_name"))
    return (name.strip() or str(sender.get("username") or ""))[:200]


class Inbound:
    """Turns Telegram updates into ore events; see the module docstring.

    `notes` sends the conduit's own replies once they are queued in the state.
    """

    def __init__(
        self,
        *,
        name: str,
        client: ConduitClient,
        api: BotApi,
        config: TelegramConfig,
        identity: Identity,
        state: State,
        notes: Notes,
        media: MediaReader,
    ) -> None:
        self.name = name
        self.client = client
        self.api = api
        self.config = config
        self.identity = identity
        self.state = state
        self.notes = notes
        self.media = media
        self._lanes: dict[str, _Lane] = {}
        self._places: dict[str, str] = {}  # thread -> conversation key recorded in the state

    async def take_all(self, updates: list[Mapping[str, Any]]) -> None:
        """Handle a batch of updates (in order per chat); return once all are done."""
        async with asyncio.TaskGroup() as tasks:
            for update in updates:
                tasks.create_task(self.take(update))

    async def take(self, update: Mapping[str, Any]) -> None:
        """Handle one update; return once its work is done (see the module docstring).
        A bug or a refusal of the core is logged: the update is then confirmed anyway,
        or it would come back forever."""
        work = self._decide(update)
        if work is None:
            return
        key, job = work
        lane = self._lanes.setdefault(key, _Lane())
        lane.users += 1
        try:
            async with lane.lock:
                await self._until_done(job)
        except OreError as exc:
            log.error("telegram update not handled", update=update.get("update_id"), error=str(exc))
        except Exception:
            log.exception("telegram update not handled", update=update.get("update_id"))
        finally:
            lane.users -= 1
            if not lane.users:
                del self._lanes[key]

    async def _until_done(self, job: Callable[[], Awaitable[None]]) -> None:
        await until_answered(job, "a telegram update waits for the core", passing=_passing)

    def _decide(
        self, update: Mapping[str, Any]
    ) -> tuple[str, Callable[[], Awaitable[None]]] | None:
        for kind in ("message", "edited_message"):
            data = update.get(kind)
            if isinstance(data, Mapping):
                break
        else:
            return None  # channel posts, callbacks, ...: not subscribed, nothing to do
        message = _Message.of(data)
        if message is None or not (message.text.strip() or message.has_file):
            return None
        if message.sender_is_bot and message.sender not in self.config.allow_bots:
            return None  # the bot itself, or another bot: never a loop
        text = self._addressed(message)
        if text is None:
            return None
        lane = f"{message.chat}:{message.topic}"
        if kind == "edited_message":
            if self.config.on_edit == "ignore":
                return None
            update_id = int(update.get("update_id") or 0)
            return lane, lambda: self._edited(message, text, update_id)
        return lane, lambda: self._message(message, text)

    def _addressed(self, message: _Message) -> str | None:
        """The text to send if the message is for the bot (mention and @suffix removed)."""
        text = message.text.strip()
        mention = f"@{self.identity.username}"
        command = text.startswith("/")
        if command:
            name, _, rest = text.partition(" ")
            name, _, target = name.partition("@")
            if target and target.lower() != self.identity.username.lower():
                return None  # a command for another bot
            text = f"{name} {rest}".strip()
        found = text.lower().find(mention.lower())
        mentioned = found >= 0
        if mentioned:
            text = (text[:found] + text[found + len(mention) :]).strip()
        if message.private or self.config.groups == "all":
            return text
        if command or mentioned or message.reply_to_sender == self.identity.id:
            return text
        return None

    async def _conversation(self, message: _Message) -> Conversation:
        """The conversation a message belongs to (remembered for replies and edits)."""
        known = await self.state.chain(message.chat, message.message_id)
        if known is None:
            if message.reply_to and not message.private:
                known = await self.state.chain(message.chat, message.reply_to)
            if known is None:
                known = await self.state.root(message.chat, message.topic)
            await self.state.add_to_chain(message.chat, message.message_id, known)
        return Conversation(message.chat, message.topic, known, message.kind)

    async def _thread_id(self, conversation: Conversation) -> str:
        """The conversation's thread; its place is recorded for the renderer, since a
        thread linked here from another conduit carries that conduit's metadata."""
        thread_id, _ = await self.client.lookup_or_create(
            THREAD_KEY, conversation.key, conversation.metadata()
        )
        if self._places.get(thread_id) != conversation.key:
            await self.state.set_place(thread_id, conversation)
            self._places[thread_id] = conversation.key
        return thread_id

    def _event(
        self,
        message: _Message,
        event: str,
        text: str,
        images: tuple[str, ...] = (),
        edit_of: str = "",
    ) -> UserMessageEvent:
        context = EventContext(
            provenance=self.name,
            user=str(message.sender),
            user_name=message.sender_name,
            traceparent=traceparent_of(event),
        )
        metadata = {"edit_of": edit_of} if edit_of else {}
        return UserMessageEvent(
            id=event, content=text, images=images, context=context, metadata=metadata
        )

    async def _read_file(self, message: _Message, text: str) -> tuple[str, tuple[str, ...]]:
        """The text and images to send for a message with a file; a notice in the chat
        for what was not read (the caption goes on regardless)."""
        if not message.has_file:
            return text, ()
        media = await self.media.read(message.files)
        if media.notice:
            await self._note(message, "file", media.notice)
        if media.text:
            text = f"{text}\n\n{media.text}" if text else media.text
        return text, media.images

    async def _message(self, message: _Message, text: str) -> None:
        command = text.split(" ", 1)[0]
        if command == "/start":
            await self._note(message, "start", self.config.greeting)
            return
        if command == "/new":
            root = str(message.message_id)
            await self.state.set_root(message.chat, message.topic, root)
            await self.state.add_to_chain(message.chat, message.message_id, root)
            await self._note(message, "new", NEW_CONVERSATION)
            return
        text, images = await self._read_file(message, text)
        if not text and not images:
            return  # a file not read, without a caption: the notice says so
        conversation = await self._conversation(message)
        thread_id = await self._thread_id(conversation)
        event = event_id(message.chat, message.message_id)
        if command == "/stop":
            await self.client.interrupt(thread_id, id=event)
            return
        if command == "/retry":
            await self._retry(thread_id, message)
            return
        await self.state.set_asked(traceparent_of(event), message.message_id, event)
        await self._send(thread_id, message, self._event(message, event, text, images))

    async def _send(self, thread_id: str, message: _Message, event: UserMessageEvent) -> None:
        """Send `event`; one too large for the bus (its images) goes without its images,
        with a notice, so the caption is never lost."""
        try:
            await self.client.send(thread_id, event)
        except ApiError as exc:
            if exc.code != "too_large" or not event.images:
                raise
            await self._note(message, "file", TOO_LARGE_FOR_BUS)
            if event.content:
                await self.client.send(thread_id, event.model_copy(update={"images": ()}))

    async def _note(self, message: _Message, what: str, text: str) -> None:
        note_id = f"{what}:{message.chat}:{message.message_id}"
        await self.state.add_note((note_id, message.chat, message.topic, message.message_id, text))
        await self.notes.flush()

    # -- edits ----------------------------------------------------------------------

    async def _edited(self, message: _Message, text: str, update_id: int) -> None:
        """One core edit: the core decides whether it is answered again (the latest
        message) or recorded in place (an older one on a linked thread), and tells the
        other endpoints, whose copies are edited in place."""
        if text.split(" ", 1)[0] in _COMMANDS:
            return
        root = await self.state.chain(message.chat, message.message_id)
        if root is None:
            return  # never answered: an edit of a message the bot did not take
        conversation = Conversation(message.chat, message.topic, root, message.kind)
        thread_id = await self._thread_id(conversation)
        original = event_id(message.chat, message.message_id)
        if not await self._recorded(thread_id, original):
            log.info("edit of a message ore never took", thread_id=thread_id)
            return
        edit = edit_event_id(message.chat, message.message_id, update_id)
        text, images = await self._read_file(message, text)
        await self.state.set_asked(traceparent_of(edit), message.message_id, original)
        context = self._event(message, edit, text).context
        await self.client.edit(thread_id, original, text, id=edit, images=images, context=context)

    async def _recorded(self, thread_id: str, message_id: str) -> bool:
        """Whether the thread holds the message (edited or not)."""
        edits = f"{message_id}:edit:"
        return any(
            turn.event_id == message_id or turn.event_id.startswith(edits)
            for turn in await self.client.turns(thread_id)
        )

    async def _retry(self, thread_id: str, message: _Message) -> None:
        """`/retry`: another answer (a sibling answer in the core; nothing is relayed
        again) to the question of the bot's answer it replies to, or else to the
        conversation's latest question."""
        if message.reply_to_sender == self.identity.id:
            thread_id, question = await self._question_of_answer(message)
            if question is None:
                await self._note(message, "retry", NOT_AN_ANSWER)
                return
        else:
            turns = await self.client.turns(thread_id)
            latest = next((t for t in reversed(turns) if t.role == Role.USER), None)
            question = latest.id if latest is not None else None
        if question is None:
            await self._note(message, "retry", NOTHING_TO_RETRY)
            return
        retry = event_id(message.chat, message.message_id)
        await self.state.set_asked(traceparent_of(retry), message.message_id, question)
        context = self._event(message, retry, "").context
        await self.client.regenerate(thread_id, question, id=retry, context=context)

    async def _question_of_answer(self, message: _Message) -> tuple[str, str | None]:
        """(the thread, the turn) of the bot's answer a `/retry` replies to, in the
        answer's own conversation (a private chat may have moved on with `/new`), or of
        the relayed copy it replies to (another endpoint's answer or question); no turn
        for a message of the bot's that is neither (a greeting)."""
        question = await self.state.question_of(message.chat, message.reply_to)
        if question is None:
            copy = platform_id(message.chat, message.reply_to)
            copied = await self.client.delivery_lookup(copy)
            return copied if copied is not None else ("", None)
        root = await self.state.chain(message.chat, message.reply_to)
        if root is None:
            return "", None
        conversation = Conversation(message.chat, message.topic, root, message.kind)
        return await self._thread_id(conversation), question


async def poll(api: BotApi, inbound: Inbound, config: TelegramConfig) -> None:
    """Long polling until cancelled: each batch is handled before the next call confirms
    it (the `offset`). The first call gets what an earlier run left unconfirmed. A
    getUpdates that fails while Telegram is away (or another poller still runs: 409) is
    tried again on the engine's schedule."""
    offset: int | None = None
    while True:
        updates = await until_answered(
            partial(
                api.call,
                "getUpdates",
                offset=offset,
                timeout=config.poll_timeout,
                allowed_updates=["message", "edited_message"],
            ),
            "telegram getUpdates",
            passing=passes,
        )
        if not isinstance(updates, list) or not updates:
            continue
        updates = [u for u in updates if isinstance(u, Mapping) and "update_id" in u]
        await inbound.take_all(updates)
        offset = max(int(u["update_id"]) for u in updates) + 1
