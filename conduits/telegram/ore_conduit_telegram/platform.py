"""TelegramPlatform: the Bot API in the engine's words (`ore_core.conduit.Platform`).

A conversation is `Conversation.key` (`CHAT:TOPIC:ROOT`); a message's platform id is
`CHAT:MESSAGE` (message ids are numbered per chat). A part is sent as Telegram HTML
rendered from Markdown when it is the bot's own text (an answer, or another endpoint's
answer), as plain text when it is a labelled copy or a notice; HTML Telegram refuses
goes again as plain text, a forum topic that is gone gets the message in the chat, and
a group that became a supergroup gets it there (and keeps getting it there). Telegram
has no idempotency key and cannot be read back (`idempotency = "none"`): the engine
claims a copy before it is posted.

A part's files (another endpoint's, fetched from ore) follow its text, each a message of
its own: `sendPhoto` for a JPEG, PNG or WebP image up to 10 MB (Telegram shows it
inline), `sendDocument` for anything else up to the 50 MB a bot may upload
(`file_max_bytes`; larger ones the engine turns into a link or a notice). A file ore
cannot hand over is a line saying so in its place.

A reaction made elsewhere is the bot's own (`setMessageReaction`): one per message and
only from Telegram's reaction emoji (`reactions`), so the last one asked for shows and
another emoji is skipped with a log line.

Inbound, updates come by long polling (`getUpdates`) or on a webhook and become the
engine's events (`updates`). An update is confirmed to Telegram only once the engine
says the core has it (`Inbound.done`): the next getUpdates' `offset` passes a batch
once every update of it is done, and the webhook answers 200 only then.
"""

from __future__ import annotations

import asyncio
import hmac
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Mapping
from functools import partial
from typing import Any, ClassVar

import aiohttp
import structlog
from aiohttp import web

from ore_conduit_telegram.api import BotApi, Limits, TelegramError, Upload
from ore_conduit_telegram.config import ENV_TOKEN, MissingToken, TelegramConfig
from ore_conduit_telegram.media import MediaReader
from ore_conduit_telegram.notes import Notes
from ore_conduit_telegram.reactions import telegram_emoji
from ore_conduit_telegram.state import State
from ore_conduit_telegram.text import to_html
from ore_conduit_telegram.updates import Identity, Updates
from ore_core import OreError
from ore_core.artifacts import Attachment
from ore_core.conduit import Capabilities, Inbound, Part, PlatformError
from ore_core.conduit.engine import PlatformContext
from ore_core.conduit.media import fetch_files
from ore_core.conduit.pacing import passes
from ore_core.conduit.waiting import until_answered

__all__ = [
    "COMMANDS",
    "TelegramPlatform",
    "check_token",
    "message_of",
    "place_of",
    "platform_id",
]

COMMANDS = (
    ("new", "Start a new conversation"),
    ("stop", "Stop the answer being written"),
    ("help", "List the commands"),
)
"""The commands shown in Telegram's menu (`setMyCommands`)."""
_ALLOWED = ["message", "edited_message", "message_reaction"]
_SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"
_FINISHED = 4096  # answers remembered as finished, so repeats of their events are skipped
UPLOAD_LIMIT = 50 * 1024 * 1024
"""The largest file a bot may send (`sendDocument`)."""
_PHOTO_LIMIT = 10 * 1024 * 1024  # sendPhoto's; a larger image goes as a document
_PHOTO_TYPES = frozenset({"image/jpeg", "image/png", "image/webp"})

log = structlog.get_logger("ore.conduit.telegram")


async def check_token(api: BotApi) -> Identity:
    """Who the bot is (`getMe`); MissingToken naming the variable of a refused token."""
    try:
        me = await api.check()
    except TelegramError as exc:
        raise MissingToken(
            f"{ENV_TOKEN} was refused by Telegram (getMe: {exc.code} {exc.description}); "
            "use the token @BotFather gave you"
        ) from None
    except OreError as exc:
        raise MissingToken(f"cannot reach Telegram to check {ENV_TOKEN}: {exc}") from None
    return Identity(int(me["id"]), str(me.get("username") or ""))


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
        reactions=True,
        idempotency="none",
        file_max_bytes=UPLOAD_LIMIT,
    )

    def __init__(
        self,
        config: TelegramConfig,
        context: PlatformContext,
        on_webhook: Callable[[str], None] | None = None,
    ) -> None:
        self.config = config
        self.context = context
        self.on_webhook = on_webhook
        self._moved: dict[int, int] = {}  # a group -> the supergroup it became
        self._session: aiohttp.ClientSession | None = None
        self._state: State | None = None
        self._runner: web.AppRunner | None = None
        self._webhook: asyncio.Queue[Inbound] = asyncio.Queue()
        self.finished: OrderedDict[str, None] = OrderedDict()  # traces of answers shown
        self._reacted: OrderedDict[tuple[int, int], str] = OrderedDict()  # the bot's own

    def chat(self, chat: int) -> int:
        """Where a chat's messages go now (a group that became a supergroup moved)."""
        return self._moved.get(chat, chat)

    def mark_finished(self, trace: str) -> None:
        """The answer with `trace` is shown for good: repeats of its events are skipped."""
        self.finished[trace] = None
        while len(self.finished) > _FINISHED:
            self.finished.popitem(last=False)

    @property
    def state(self) -> State:
        assert self._state is not None, "connect() first"
        return self._state

    # -- the engine's calls -----------------------------------------------------------

    async def connect(self) -> None:
        """Open the session and the state, learn who the bot is, register its commands,
        send the local replies an earlier run left, then listen (webhook or polling)."""
        config = self.config
        self._session = aiohttp.ClientSession()
        limits = Limits(config.chat_per_second, config.group_per_minute, config.overall_per_second)
        self.api = BotApi(self._session, config.api_url, config.bot_token(), limits)
        self.identity = await check_token(self.api)
        self._state = await State.open(config.state_dir / f"state-{config.durable}.db")
        self.media = MediaReader(self.api, self.context.client)
        self.notes = Notes(self, self.state)
        self.updates = Updates(config, self.identity, self.state)
        log.info("telegram conduit starting", mode=config.mode, bot=self.identity.username)
        commands = [{"command": name, "description": text} for name, text in COMMANDS]
        try:
            await self._setup("setMyCommands", commands=commands)
        except PlatformError as exc:
            log.info("commands not registered", error=exc.detail)
        await self.notes.flush()  # what an earlier run queued and did not send
        if config.mode == "webhook":
            await self._listen()
        else:
            await self._setup("deleteWebhook")

    async def close(self) -> None:
        if self._runner is not None:
            await asyncio.shield(self._runner.cleanup())
        if self._state is not None:
            await self._state.close()
        if self._session is not None:
            await self._session.close()

    async def events(self) -> AsyncIterator[Inbound]:
        """The updates' events (see the module docstring), until cancelled."""
        if self.config.mode == "webhook":
            while True:
                yield await self._webhook.get()
        offset: int | None = None
        while True:
            call = partial(
                self.api.call,
                "getUpdates",
                offset=offset,
                timeout=self.config.poll_timeout,
                allowed_updates=_ALLOWED,
            )
            got = await until_answered(call, "telegram getUpdates", passing=passes)
            batch = [u for u in got or () if isinstance(u, Mapping) and "update_id" in u]
            confirmed = []
            for update in batch:
                done = asyncio.Event()
                confirmed.append(done)
                inbound = await self.updates.inbound(update, partial(_confirm, done))
                if inbound is None:
                    done.set()
                else:
                    yield inbound
            for done in confirmed:
                await done.wait()
            if batch:
                offset = max(int(u["update_id"]) for u in batch) + 1

    async def _setup(self, method: str, **params: Any) -> None:
        """A setup call, tried again while Telegram is away (the engine's one policy)."""
        call = partial(self.api.call, method, **params)
        await until_answered(call, f"telegram {method}", passing=passes)

    async def _listen(self) -> None:
        """Serve the webhook and tell Telegram where it is."""
        config = self.config
        app = web.Application(client_max_size=1024 * 1024)
        app.router.add_post(config.listen_path, self._handle)
        self._runner = web.AppRunner(app, handle_signals=False)
        await self._runner.setup()
        await web.TCPSite(self._runner, config.listen_host, config.listen_port).start()
        port = int(self._runner.addresses[0][1])
        local = f"http://{config.listen_host}:{port}{config.listen_path}"
        secret = config.secret()
        url = config.webhook_url or local
        await self._setup("setWebhook", url=url, secret_token=secret, allowed_updates=_ALLOWED)
        log.info("telegram webhook listening", url=local)
        if self.on_webhook is not None:
            self.on_webhook(local)

    async def _handle(self, request: web.Request) -> web.Response:
        """One webhook call: answered 200 only once its update is done (else Telegram
        sends it again), and only with the right secret header."""
        given = request.headers.get(_SECRET_HEADER, "")
        if not hmac.compare_digest(given.encode(), self.config.secret().encode()):
            log.warning("webhook call with a wrong secret refused", peer=request.remote)
            return web.json_response({"error": "wrong secret token"}, status=401)
        try:
            update: Any = await request.json()
        except ValueError:
            return web.json_response({"error": "the body is not JSON"}, status=400)
        if not isinstance(update, Mapping) or not isinstance(update.get("update_id"), int):
            return web.json_response({"error": "not a Telegram update"}, status=400)
        done = asyncio.Event()
        inbound = await self.updates.inbound(update, partial(_confirm, done))
        if inbound is not None:
            await self._webhook.put(inbound)
            await done.wait()
        return web.json_response({})

    async def post(self, conversation: str, part: Part, key: str) -> str:
        html = part.sender is None and part.kind == "text"
        text = part.text.rstrip("\n")  # Telegram trims a message's end anyway
        posted = ""
        if text.strip() or not part.attachments:
            posted = await self.send(conversation, text, html=html, reply_to=part.reply_to)
        for attachment in part.attachments:
            sent = await self.send_file(conversation, attachment)
            posted = posted or sent
        return posted

    async def edit(self, conversation: str, platform_id: str, part: Part) -> None:
        html = part.sender is None and part.kind == "text"
        await self.change(platform_id, part.text.rstrip("\n"), html=html)

    async def delete(self, conversation: str, platform_id: str) -> None:
        chat, _, message = platform_id.rpartition(":")
        try:
            await self.api.call("deleteMessage", chat_id=int(chat), message_id=int(message))
        except TelegramError as exc:  # gone already: what a delete wants
            log.info("message not deleted", message=platform_id, error=exc.description)

    async def react(self, conversation: str, platform_id: str, emoji: str, add: bool) -> None:
        """The bot's one reaction on a message (module docstring): `emoji` set, or taken
        back unless the bot shows another one there by now."""
        chat, _, message = platform_id.rpartition(":")
        try:
            where = {"chat_id": self.chat(int(chat.rpartition(":")[2])), "message_id": int(message)}
        except ValueError:
            log.info("reaction not shown: not a Telegram message", message=platform_id)
            return
        shown = telegram_emoji(emoji)
        if shown is None:
            log.info("reaction not shown: not one of Telegram's", emoji=emoji)
            return
        key = (where["chat_id"], where["message_id"])
        if not add and self._reacted.get(key, shown) != shown:
            return  # the bot's reaction there is another one now
        reaction = [{"type": "emoji", "emoji": shown}] if add else []
        await self.api.call("setMessageReaction", **where, reaction=reaction)
        if add:
            self._reacted[key] = shown
            if len(self._reacted) > _FINISHED:
                self._reacted.popitem(last=False)
        else:
            self._reacted.pop(key, None)

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

    async def send_file(self, conversation: str, attachment: Attachment) -> str:
        """`sendPhoto` or `sendDocument` of an attachment fetched from ore (a line
        saying so when ore cannot hand it over); the new message's platform id."""
        context = self.context
        fetched, lines = await fetch_files(
            context.client, context.conversations, conversation, [attachment]
        )
        if lines:
            return await self.send(conversation, lines[0], html=False)
        ((_, data),) = fetched
        chat, topic = place_of(conversation)
        where: dict[str, Any] = {"chat_id": self.chat(chat)}
        if topic:
            where["message_thread_id"] = topic
        photo = attachment.media_type in _PHOTO_TYPES and attachment.size <= _PHOTO_LIMIT
        field, method = ("photo", "sendPhoto") if photo else ("document", "sendDocument")
        upload = Upload(field, attachment.name, attachment.media_type, data)
        sent = await self.api.call_with(method, upload, **where)
        return platform_id(where["chat_id"], int(sent["message_id"]))

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


async def _confirm(done: asyncio.Event) -> None:
    done.set()
