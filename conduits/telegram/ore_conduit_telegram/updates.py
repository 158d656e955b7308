"""Updates: a Telegram update -> the engine's inbound event, or nothing.

- Taken: every message of a private chat; in groups, messages addressed to the bot (a
  mention, a command, a reply to the bot) or all (`groups = "all"`), the mention and a
  command's `@botname` removed.
- Ignored: the bot's own messages, other bots (unless `allow_bots`), service messages,
  edits when `on_edit = "ignore"` and edits of commands.
- Conversations (`Conversation.key`): a private chat (or forum topic) is one
  conversation until `/new` starts another. In groups a reply continues the
  conversation of the message it replies to (a reply chain is a thread); another
  message continues the chat's current conversation. Each message's conversation is
  kept in the state, for replies and edits.
- Reactions: a user's `message_reaction` update is its adds and removals
  (`reactions.TelegramReactions`) on the message, named by its event id, in the
  conversation the message is kept in (else the chat's current one).
- Commands: `/start`, `/new`, `/stop` and `/retry` are `Command`s (the conduit answers
  the first two itself, the engine interrupts for `/stop`); every other command
  (`/help`, ...) is a message the core reads.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ore_conduit_telegram.config import TelegramConfig
from ore_conduit_telegram.ids import Conversation, edit_event_id, event_id
from ore_conduit_telegram.media import file_kinds
from ore_conduit_telegram.reactions import TelegramReactions, changes
from ore_conduit_telegram.state import State
from ore_core.conduit import Command, Edit, Inbound, Message, Reaction, Sender

__all__ = ["COMMANDS", "Identity", "Said", "TelegramCommand", "TelegramEdit", "TelegramMessage"]

COMMANDS = ("start", "new", "stop", "retry")
"""The commands that are not messages: the conduit's own, and the interrupt."""


@dataclass(frozen=True, slots=True)
class Identity:
    """Who the bot is, from `getMe` at start."""

    id: int
    username: str


@dataclass(frozen=True, slots=True)
class Said:
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
    def of(cls, data: Mapping[str, Any]) -> Said | None:
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
    def event_id(self) -> str:
        return event_id(self.chat, self.message_id)

    def conversation(self, root: str) -> Conversation:
        return Conversation(self.chat, self.topic, root, self.kind)


def _display_name(sender: Mapping[str, Any]) -> str:
    """A Telegram user's name as people see it: first and last name, else the username."""
    name = " ".join(str(sender.get(k) or "").strip() for k in ("first_name", "last_name"))
    return (name.strip() or str(sender.get("username") or ""))[:200]


@dataclass(frozen=True, slots=True, kw_only=True)
class TelegramMessage(Message):
    """A message, with the Telegram message it is (its files, its chat)."""

    said: Said


@dataclass(frozen=True, slots=True, kw_only=True)
class TelegramEdit(Edit):
    """An edit, with the Telegram message as it reads now."""

    said: Said


@dataclass(frozen=True, slots=True, kw_only=True)
class TelegramCommand(Command):
    """`/start`, `/new`, `/stop` or `/retry`, with the Telegram message that gave it."""

    said: Said


class Updates:
    """Reads updates for one bot (see the module docstring)."""

    def __init__(self, config: TelegramConfig, identity: Identity, state: State) -> None:
        self.config = config
        self.identity = identity
        self.state = state

    async def inbound(
        self, update: Mapping[str, Any], done: Callable[[], Awaitable[None]]
    ) -> Inbound | None:
        """The event of `update` (None: nothing for the core)."""
        reacted = update.get("message_reaction")
        if isinstance(reacted, Mapping):
            return await self._reactions(reacted, int(update["update_id"]), done)
        for kind in ("message", "edited_message"):
            data = update.get(kind)
            if isinstance(data, Mapping):
                break
        else:
            return None  # channel posts, callbacks, ...: not subscribed, nothing to do
        said = Said.of(data)
        if said is None or not (said.text.strip() or said.files):
            return None
        if said.sender_is_bot and said.sender not in self.config.allow_bots:
            return None  # the bot itself, or another bot: never a loop
        text = self._addressed(said)
        if text is None:
            return None
        sender = Sender(said.sender_name, str(said.sender))
        name, _, args = text.partition(" ")
        command = name[1:] if name.startswith("/") and name[1:] in COMMANDS else ""
        if kind == "edited_message":
            root = await self.state.chain(said.chat, said.message_id)
            if self.config.on_edit == "ignore" or command or root is None:
                return None  # a command, or a message the bot never took
            edit_id = edit_event_id(said.chat, said.message_id, int(update["update_id"]))
            key = said.conversation(root).key
            return TelegramEdit(
                conversation=key, platform_id=edit_id, sender=sender, target=said.event_id,
                text=text, said=said, done=done,
            )  # fmt: skip
        if command == "new":  # here, not later: the next update's conversation is the new one
            await self.state.set_root(said.chat, said.topic, str(said.message_id))
        key = (await self._conversation(said)).key
        if command:
            return TelegramCommand(
                conversation=key, platform_id=said.event_id, sender=sender, name=command,
                args=args.strip(), said=said, done=done,
            )  # fmt: skip
        return TelegramMessage(
            conversation=key, platform_id=said.event_id, sender=sender, text=text, said=said,
            done=done,
        )  # fmt: skip

    async def _reactions(
        self, reacted: Mapping[str, Any], update_id: int, done: Callable[[], Awaitable[None]]
    ) -> Inbound | None:
        """A user's changed reactions on a message (an anonymous admin's are not one)."""
        user, chat = reacted.get("user"), reacted.get("chat")
        if not isinstance(user, Mapping) or not isinstance(chat, Mapping):
            return None
        if int(user.get("id") or 0) == self.identity.id:
            return None  # the bot's own: what it shows for others
        added, removed = changes(reacted)
        if not added and not removed:
            return None
        chat_id, message_id = int(chat["id"]), int(reacted["message_id"])
        root = await self.state.chain(chat_id, message_id)
        if root is None:
            root = await self.state.root(chat_id, 0)
        key = Conversation(chat_id, 0, root).key
        sender, target = Sender(_display_name(user), str(user["id"])), event_id(chat_id, message_id)
        changed = [(emoji, False) for emoji in added] + [(emoji, True) for emoji in removed]
        reactions = tuple(
            Reaction(
                conversation=key,
                platform_id=f"{target}:reaction:{sender.id}:{emoji}:{'-+'[not gone]}{update_id}",
                sender=sender,
                target=target,
                emoji=emoji,
                removed=gone,
            )
            for emoji, gone in changed
        )
        return TelegramReactions(
            conversation=key, platform_id=f"{target}:reactions:{update_id}", reactions=reactions,
            done=done,
        )  # fmt: skip

    def _addressed(self, said: Said) -> str | None:
        """The text to send if the message is for the bot (mention and @suffix removed)."""
        text = said.text.strip()
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
        if said.private or self.config.groups == "all":
            return text
        if command or mentioned or said.reply_to_sender == self.identity.id:
            return text
        return None

    async def _conversation(self, said: Said) -> Conversation:
        """The conversation a message belongs to (remembered for replies and edits)."""
        known = await self.state.chain(said.chat, said.message_id)
        if known is None:
            if said.reply_to and not said.private:
                known = await self.state.chain(said.chat, said.reply_to)
            if known is None:
                known = await self.state.root(said.chat, said.topic)
            await self.state.add_to_chain(said.chat, said.message_id, known)
        return said.conversation(known)
