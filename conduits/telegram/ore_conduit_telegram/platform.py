"""TelegramPlatform: the Bot API in the engine's words (`ore_core.conduit.Platform`).

A conversation is `Conversation.key` (`CHAT:TOPIC:ROOT`); a message's platform id is
`CHAT:MESSAGE` (message ids are numbered per chat). A part is sent as Telegram HTML
rendered from Markdown when it is the bot's own text (an answer, or another endpoint's
answer), as plain text when it is a labelled copy or a notice; HTML Telegram refuses
goes again as plain text, a forum topic that is gone gets the message in the chat, and
a group that became a supergroup gets it there (and keeps getting it there). Telegram
has no idempotency key and cannot be read back (`idempotency = "none"`): the engine
claims a copy before it is posted.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, ClassVar

import structlog

from ore_conduit_telegram.api import BotApi, TelegramError
from ore_conduit_telegram.text import to_html
from ore_core.conduit import Capabilities, Inbound, Part

__all__ = ["TelegramPlatform", "message_of", "place_of", "platform_id"]

log = structlog.get_logger("ore.conduit.telegram")


def platform_id(chat: int, message: int) -> str:
    """The platform id of a Telegram message (as the delivery map keeps it)."""
    return f"{chat}:{message}"


def message_of(pid: str) -> int:
    """The message id of a platform id (0: none)."""
    try:
        return int(pid.rpartition(":")[2])
    except ValueError:
        return 0


def place_of(conversation: str) -> tuple[int, int]:
    """(chat, topic) of a conversation key."""
    chat, _, rest = conversation.partition(":")
    return int(chat), int(rest.partition(":")[0] or 0)


class TelegramPlatform:
    """Posts, edits and deletes messages of the conduit's conversations (see the module
    docstring)."""

    capabilities: ClassVar[Capabilities] = Capabilities(
        edit=True,
        delete=True,
        threads=True,
        streaming=True,
        markup="telegram_html",
        max_message_length=4096,
        edits_arrive=True,
        deletes_arrive=False,
        idempotency="none",
    )

    def __init__(self, api: BotApi) -> None:
        self.api = api
        self._moved: dict[int, int] = {}  # a group -> the supergroup it became

    def chat(self, chat: int) -> int:
        """Where a chat's messages go now (a group that became a supergroup moved)."""
        return self._moved.get(chat, chat)

    # -- the engine's calls -----------------------------------------------------------

    async def connect(self) -> None:
        """Nothing: `TelegramConduit` checks the token and opens the session."""

    async def close(self) -> None:
        """Nothing: the session is the conduit's."""

    async def events(self) -> AsyncIterator[Inbound]:
        """None yet: the conduit's poller or webhook takes the updates (`inbound`)."""
        nothing: tuple[Inbound, ...] = ()
        for event in nothing:
            yield event

    async def post(self, conversation: str, part: Part, key: str) -> str:
        html = part.sender is None and part.kind == "text"
        text = part.text.rstrip("\n")  # Telegram trims a message's end anyway
        return await self.send(conversation, text, html=html, reply_to=part.reply_to)

    async def edit(self, conversation: str, platform_id: str, part: Part) -> None:
        html = part.sender is None and part.kind == "text"
        await self.change(platform_id, part.text.rstrip("\n"), html=html)

    async def delete(self, conversation: str, platform_id: str) -> None:
        chat, _, message = platform_id.rpartition(":")
        try:
            await self.api.call("deleteMessage", chat_id=int(chat), message_id=int(message))
        except TelegramError as exc:  # gone already: what a delete wants
            log.info("message not deleted", message=platform_id, error=exc.description)

    # -- Telegram's own -----------------------------------------------------------------

    async def send(self, conversation: str, text: str, *, html: bool, reply_to: str = "") -> str:
        """`sendMessage` of `text` in the conversation; the new message's platform id."""
        chat, topic = place_of(conversation)
        where: dict[str, Any] = {"chat_id": self.chat(chat)}
        if topic:  # the General topic and plain chats: no thread id
            where["message_thread_id"] = topic
        if message_of(reply_to):
            reply = {"message_id": message_of(reply_to), "allow_sending_without_reply": True}
            where["reply_parameters"] = reply
        while True:
            shown = {"text": to_html(text), "parse_mode": "HTML"} if html else {"text": text}
            try:
                sent = await self.api.call("sendMessage", **shown, **where)
                return platform_id(where["chat_id"], int(sent["message_id"]))
            except TelegramError as exc:
                if html and exc.says("can't parse entities"):
                    log.info("formatting refused, sending plain text", error=exc.description)
                    html = False
                elif exc.migrate_to_chat_id and where["chat_id"] != exc.migrate_to_chat_id:
                    log.info("the group became a supergroup", chat=exc.migrate_to_chat_id)
                    self._moved[chat] = where["chat_id"] = exc.migrate_to_chat_id
                    where.pop("reply_parameters", None)
                elif exc.says("thread not found") and "message_thread_id" in where:
                    log.warning("topic gone, sending to the chat", conversation=conversation)
                    del where["message_thread_id"]
                else:
                    raise

    async def change(self, pid: str, text: str, *, html: bool) -> None:
        """`editMessageText` of message `pid` to `text` ("not modified" is done);
        `TelegramError` when the message is gone or not the bot's."""
        chat, _, message = pid.rpartition(":")
        where = {"chat_id": int(chat), "message_id": int(message)}
        while True:
            shown = {"text": to_html(text), "parse_mode": "HTML"} if html else {"text": text}
            try:
                await self.api.call("editMessageText", **shown, **where)
                return
            except TelegramError as exc:
                if exc.says("message is not modified"):
                    return
                if not (html and exc.says("can't parse entities")):
                    raise
                html = False
