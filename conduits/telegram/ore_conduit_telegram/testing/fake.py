"""FakeTelegram: a local Bot API server for tests, a real aiohttp server on 127.0.0.1.

What it serves (`POST|GET /bot<token>/<method>`, JSON, form or query parameters):

- `getMe`, `getUpdates` (long polling with `offset`, `limit`, `timeout`; an update is
  forgotten only once a later call's `offset` passes it, as Telegram confirms updates;
  a second poll ends the one waiting with 409), `setWebhook` / `deleteWebhook` /
  `getWebhookInfo` (while a webhook is set, `getUpdates` answers 409 and the fake POSTs
  each update to the URL with `X-Telegram-Bot-Api-Secret-Token`, again until it gets
  a 200), `sendMessage`, `editMessageText`, `sendMessageDraft` (private chats only),
  `sendChatAction`, `deleteMessage`, `setMyCommands`, `setMessageReaction` (the bot's
  one reaction per message, from Telegram's reaction emoji: `bot_reaction`; two
  "REACTIONS_TOO_MANY", another emoji "REACTION_INVALID"), `sendPhoto` and `sendDocument`
  (multipart, the file's bytes kept: `bot_files`; over 50 MB "Request Entity Too
  Large", a photo over 10 MB "file is too big"), `getFile` (over 20 MB "file is too
  big", as for bots) and the file download `GET /file/bot<token>/<file_path>` (each
  counted in `downloads`). Any other method answers 404 "Not Found", a wrong token 401
  "Unauthorized".
- **Telegram's checks**: text of 1-4096 characters after entity parsing ("message is
  too long", "message text is empty"); `parse_mode=HTML` parsed with Telegram's tag set
  (an unknown or unbalanced tag: "can't parse entities"); an edit to the same text:
  "message is not modified"; a `message_thread_id` that is not a topic of the forum
  (the General topic included, which is addressed by leaving the id out): "message
  thread not found".
- **Server-side state**: chats (private, group, supergroup, forum with topics), messages
  with per-chat increasing ids, drafts, chat actions, every call (`calls(method)`).
- **What a user sees**: `view(chat, topic)` lists the visible messages of a chat (or of
  one topic), text as rendered (HTML tags removed); `bot_texts` only the bot's; `draft`
  the bot's draft now shown.
- **Reactions**: `user_reacts(message, emoji)` sets a user's reactions on a message
  and queues the `message_reaction` update (old and new reactions), only if the bot
  asked for that kind in `allowed_updates` (as Telegram sends none by default).
- **Users**: `user_says`, `user_edits`, `other_bot_says`, `user_sends_file` (a
  document), `user_sends_photo` (a photo in several sizes) and `user_sends_media` (a
  sticker, a voice message, ...) add a message (or edit) and queue its update.
- **Scripted faults**: `fail_next(method, status=..., description=..., retry_after=...)`
  (429 with `parameters.retry_after`, a 400 of any description, a 502), `drop_next(method,
  commit=...)` (the connection closes without an answer, after carrying the call out or
  not), and rate windows `rate_limit(per_chat=..., per_group=..., overall=...)`, answered
  with 429 and `retry_after` like Telegram's flood control. The file download takes the
  faults of the method name `"file"` (`fail_next("file", status=502)`, `drop_next("file")`;
  a 3xx redirects to the same URL, so `times=11` makes a redirect loop; `cut_next("file")`
  sends half the body and closes the connection). `hold_next(method)`
  keeps the next call of `method` waiting (`holding` counts them) until `let_go()`, then
  carries it out: a bot killed meanwhile never learns its outcome.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any
from urllib.parse import parse_qsl

import aiohttp
from aiohttp import web

__all__ = ["FakeChat", "FakeMessage", "FakeTelegram", "FakeUpload", "RecordedCall"]

TOKEN = "7000001:FAKE-token-for-tests-0123456789abcd"
BOT_ID = 7000001
BOT_USERNAME = "ore_test_bot"
SECRET = "fake-webhook-secret"
ALICE = 1001
TEXT_LIMIT = 4096
GENERAL_TOPIC = 1
_TAGS = {
    "b", "strong", "i", "em", "u", "ins", "s", "strike", "del", "span",
    "tg-spoiler", "a", "code", "pre", "blockquote", "tg-emoji",
}  # fmt: skip
_SENDS = frozenset({"sendMessage", "editMessageText", "sendPhoto", "sendDocument"})
_ACTIONS = frozenset({"typing", "upload_photo", "upload_document", "choose_sticker"})
DOWNLOAD_LIMIT = 20 * 1024 * 1024  # getFile's limit for bots
UPLOAD_LIMIT = 50 * 1024 * 1024  # sendDocument's limit for bots
PHOTO_LIMIT = 10 * 1024 * 1024  # sendPhoto's
REACTION_EMOJI = frozenset(("👍", "👎", "❤", "🔥", "🎉", "🙏", "👌", "👀", "💯", "🤔"))
"""Some of Telegram's reaction emoji (what a bot may react with), as the fake checks."""


@dataclass(frozen=True)
class FakeUpload:
    """A file a multipart call carried."""

    name: str
    media_type: str
    data: bytes


@dataclass
class FakeChat:
    """A chat the bot is in. `kind`: private, group, supergroup; `forum`: topics on."""

    id: int
    kind: str
    title: str = ""
    forum: bool = False
    topics: set[int] = field(default_factory=set)
    migrated_to: int = 0

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"id": self.id, "type": self.kind}
        if self.kind == "private":
            data["first_name"] = self.title or "Alice"
        else:
            data["title"] = self.title or f"chat {self.id}"
        if self.forum:
            data["is_forum"] = True
        return data


@dataclass
class FakeMessage:
    """One message of a chat, as Telegram keeps it."""

    message_id: int
    chat: FakeChat
    text: str  # as shown (entities parsed)
    sender: int
    sender_is_bot: bool = False
    topic: int = 0  # 0: none (or the General topic)
    reply_to: FakeMessage | None = None
    source: str = ""  # what the bot sent (HTML source when parse_mode was HTML)
    parse_mode: str = ""
    date: int = 0
    edits: int = 0
    deleted: bool = False
    file_id: str = ""  # of a document, or of a file the bot posted
    file_name: str = ""  # of a file the bot posted
    media: dict[str, Any] = field(default_factory=dict)  # "photo", "document", ... as sent
    reactions: dict[int, list[str]] = field(default_factory=dict)  # user -> their emoji
    bot_reaction: list[str] = field(default_factory=list)  # the bot's (one at most)

    def to_json(self, *, with_reply: bool = True) -> dict[str, Any]:
        """The message as an update carries it."""
        data: dict[str, Any] = {
            "message_id": self.message_id,
            "date": self.date,
            "chat": self.chat.to_json(),
            "from": {
                "id": self.sender,
                "is_bot": self.sender_is_bot,
                "first_name": "ore" if self.sender == BOT_ID else f"user{self.sender}",
            },
        }
        if self.sender_is_bot:
            data["from"]["username"] = BOT_USERNAME if self.sender == BOT_ID else "other_bot"
        if self.media:
            data.update(self.media)
            if self.text:
                data["caption"] = self.text
        else:
            data["text"] = self.text
            entities = _entities(self.text)
            if entities:
                data["entities"] = entities
        if self.topic:
            data["message_thread_id"] = self.topic
            data["is_topic_message"] = True
        if self.reply_to is not None and with_reply:
            data["reply_to_message"] = self.reply_to.to_json(with_reply=False)
        return data


@dataclass(frozen=True)
class RecordedCall:
    """One Bot API call the fake received."""

    method: str
    params: Mapping[str, Any]


@dataclass
class _Fault:
    status: int
    description: str
    retry_after: int | None
    drop: bool
    commit: bool
    cut: bool = False


@dataclass
class _Window:
    limit: int
    seconds: float
    stamps: deque[float] = field(default_factory=deque)

    def admit(self, now: float) -> bool:
        while self.stamps and self.stamps[0] <= now - self.seconds:
            self.stamps.popleft()
        if len(self.stamps) >= self.limit:
            return False
        self.stamps.append(now)
        return True


class _Refusal(Exception):
    def __init__(
        self,
        status: int,
        description: str,
        retry_after: int | None = None,
        migrate_to_chat_id: int = 0,
    ) -> None:
        super().__init__(description)
        self.status = status
        self.description = description
        self.retry_after = retry_after
        self.migrate_to_chat_id = migrate_to_chat_id


class FakeTelegram:
    """See the module docstring. `start()` it, `close()` it; `api_url` for the conduit."""

    def __init__(self) -> None:
        self.token = TOKEN
        self.bot_id = BOT_ID
        self.username = BOT_USERNAME
        self.chats: dict[int, FakeChat] = {}
        self.messages: dict[int, list[FakeMessage]] = {}
        self.drafts: dict[tuple[int, int], str] = {}
        self.actions: list[tuple[int, int, str]] = []  # (chat, topic, action)
        self.commands: list[dict[str, Any]] = []
        self.refused: list[tuple[str, str]] = []  # (method, description) of every 4xx
        self.throttled: list[tuple[str, int]] = []  # (method, chat) answered with 429
        self.webhook_url = ""
        self.webhook_secret = ""
        self.allowed_updates: list[str] = []  # the last a getUpdates or setWebhook gave
        self.confirmed = 0  # the highest update_id confirmed by an offset
        self.polls = 0
        self.handed = 0  # the highest update_id getUpdates returned
        self.pushes = 0  # webhook posts begun
        self.files: dict[str, bytes] = {}
        self.downloads: list[str] = []  # file ids served by the file download, in order
        self._file_paths: dict[str, str] = {}  # file_path -> file_id
        self._updates: list[dict[str, Any]] = []
        self._update_ids = itertools.count(100_001)
        self._ids: dict[int, itertools.count[int]] = {}
        self._file_ids = itertools.count(1)
        self._calls: list[RecordedCall] = []
        self._faults: dict[str, deque[_Fault]] = {}
        self._windows: dict[str, tuple[int, float]] = {}
        self._retry_after = 1
        self._holds: dict[str, int] = {}
        self._let_go = asyncio.Event()
        self.holding = 0  # calls held by `hold_next` so far
        self._stamps: dict[tuple[str, int], _Window] = {}
        self._poller: asyncio.Future[None] | None = None
        self._changed = asyncio.Condition()
        self._runner: web.AppRunner | None = None
        self._pusher: asyncio.Task[None] | None = None
        self.port = 0
        self._closing = False

    # -- lifetime -------------------------------------------------------------------

    async def start(self) -> FakeTelegram:
        """Listen on 127.0.0.1 on a free port."""
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/bot{token}/{method}", self._api)
        app.router.add_get("/file/bot{token}/{path:.+}", self._file)
        self._runner = web.AppRunner(app, handle_signals=False)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.port = int(self._runner.addresses[0][1])
        return self

    async def close(self) -> None:
        """Stop serving (and pushing to a webhook); a waiting getUpdates returns."""
        self._closing = True
        await self._notify()
        if self._pusher is not None:
            self._pusher.cancel()
            await asyncio.gather(self._pusher, return_exceptions=True)
        if self._runner is not None:
            await self._runner.cleanup()

    @property
    def api_url(self) -> str:
        """The Bot API base URL (the conduit's `api_url`)."""
        return f"http://127.0.0.1:{self.port}"

    def conduit_settings(self, state_dir: str, **extra: Any) -> dict[str, Any]:
        """A `[plugins.telegram]` table pointing the conduit at this fake."""
        return {"api_url": self.api_url, "token": self.token, "state_dir": state_dir, **extra}

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    async def wait_until(self, predicate: Callable[[], bool], within: float = 10.0) -> None:
        """Wait until `predicate()` holds (checked on every change the fake sees)."""
        async with asyncio.timeout(within):
            async with self._changed:
                await self._changed.wait_for(predicate)

    # -- chats and users ------------------------------------------------------------

    def chat(self, chat_id: int, kind: str = "", *, forum: bool = False) -> FakeChat:
        """The chat `chat_id`, created on first use (private for positive ids, else a
        supergroup; `kind` and `forum` decide otherwise)."""
        chat = self.chats.get(chat_id)
        if chat is None:
            kind = kind or ("private" if chat_id > 0 else "supergroup")
            chat = self.chats[chat_id] = FakeChat(chat_id, kind, forum=forum)
            self.messages[chat_id] = []
            self._ids[chat_id] = itertools.count(1)
        return chat

    def migrate(self, chat_id: int, to_chat_id: int) -> FakeChat:
        """The group `chat_id` becomes the supergroup `to_chat_id` (sends to the old id
        are then refused with `migrate_to_chat_id`)."""
        self.chat(chat_id, "group").migrated_to = to_chat_id
        return self.chat(to_chat_id, "supergroup")

    def open_topic(self, chat_id: int) -> int:
        """A new forum topic in a forum chat; its `message_thread_id`."""
        chat = self.chat(chat_id, "supergroup", forum=True)
        topic = self._add(chat, "topic created", BOT_ID, sender_is_bot=True).message_id
        self.messages[chat_id][-1].deleted = True  # the service message is not shown
        chat.topics.add(topic)
        return topic

    def _add(
        self,
        chat: FakeChat,
        text: str,
        sender: int,
        *,
        sender_is_bot: bool = False,
        topic: int = 0,
        reply_to: FakeMessage | None = None,
    ) -> FakeMessage:
        message = FakeMessage(
            next(self._ids[chat.id]),
            chat,
            text,
            sender,
            sender_is_bot=sender_is_bot,
            topic=topic,
            reply_to=reply_to,
            date=int(time.time()),
        )
        self.messages[chat.id].append(message)
        return message

    def _queue(self, kind: str, message: FakeMessage) -> dict[str, Any]:
        data = message.to_json()
        if kind == "edited_message":
            data["edit_date"] = int(time.time())
        update = {"update_id": next(self._update_ids), kind: data}
        self._updates.append(update)
        return update

    async def user_says(
        self,
        chat_id: int,
        text: str,
        *,
        user: int = ALICE,
        topic: int = 0,
        reply_to: FakeMessage | None = None,
    ) -> FakeMessage:
        """A user writes `text` in the chat (a topic of it, a reply); its update is queued."""
        chat = self.chat(chat_id)
        message = self._add(chat, text, user, topic=topic, reply_to=reply_to)
        self._queue("message", message)
        await self._notify()
        return message

    async def user_reacts(self, message: FakeMessage, *emoji: str, user: int = ALICE) -> None:
        """`user`'s reactions on `message` are now `emoji` (none: all taken back); the
        `message_reaction` update is queued if the bot asked for such updates."""
        old = message.reactions.get(user, [])
        message.reactions[user] = list(emoji)
        if "message_reaction" not in self.allowed_updates:
            return
        update = {
            "update_id": next(self._update_ids),
            "message_reaction": {
                "chat": message.chat.to_json(),
                "message_id": message.message_id,
                "user": {"id": user, "is_bot": False, "first_name": f"user{user}"},
                "date": int(time.time()),
                "old_reaction": [{"type": "emoji", "emoji": e} for e in old],
                "new_reaction": [{"type": "emoji", "emoji": e} for e in emoji],
            },
        }
        self._updates.append(update)
        await self._notify()

    def _allow(self, params: Mapping[str, Any]) -> None:
        allowed = params.get("allowed_updates")
        if isinstance(allowed, str):
            allowed = json.loads(allowed)
        if isinstance(allowed, list):
            self.allowed_updates = [str(kind) for kind in allowed]

    async def user_edits(self, message: FakeMessage, text: str) -> None:
        """The user changes a message's text; an `edited_message` update is queued."""
        message.text = text
        message.edits += 1
        self._queue("edited_message", message)
        await self._notify()

    async def other_bot_says(self, chat_id: int, text: str, *, bot: int = 7000002) -> FakeMessage:
        """Another bot writes in the chat (it must never be answered)."""
        message = self._add(self.chat(chat_id), text, bot, sender_is_bot=True)
        self._queue("message", message)
        await self._notify()
        return message

    async def user_sends_file(
        self,
        chat_id: int,
        data: bytes,
        caption: str = "",
        *,
        user: int = ALICE,
        file_name: str = "file.bin",
        mime_type: str = "application/octet-stream",
    ) -> FakeMessage:
        """A user sends a document (kept by the fake for `getFile` and the download)."""
        file_id = self._keep(data, "documents", file_name.rpartition(".")[2] or "bin")
        document = {
            "file_id": file_id,
            "file_unique_id": file_id,
            "file_name": file_name,
            "mime_type": mime_type,
            "file_size": len(data),
        }
        message = await self._sends(chat_id, {"document": document}, caption, user)
        message.file_id = file_id
        return message

    async def user_sends_photo(
        self, chat_id: int, sizes: Sequence[bytes], caption: str = "", *, user: int = ALICE
    ) -> FakeMessage:
        """A user sends a photo; `sizes` are its JPEG bytes from the smallest to the
        largest (Telegram's order), each a `PhotoSize` with its `file_size`."""
        photo = []
        for n, data in enumerate(sizes, 1):
            file_id = self._keep(data, "photos", "jpg")
            photo.append(
                {
                    "file_id": file_id,
                    "file_unique_id": file_id,
                    "width": 90 * n,
                    "height": 60 * n,
                    "file_size": len(data),
                }
            )
        return await self._sends(chat_id, {"photo": photo}, caption, user)

    async def user_sends_media(
        self,
        chat_id: int,
        kind: str,
        data: bytes = b"media",
        caption: str = "",
        *,
        user: int = ALICE,
    ) -> FakeMessage:
        """A user sends a file of another `kind` (`sticker`, `voice`, `video`, ...)."""
        file_id = self._keep(data, kind, "bin")
        part = {"file_id": file_id, "file_unique_id": file_id, "file_size": len(data)}
        return await self._sends(chat_id, {kind: part}, caption, user)

    def _keep(self, data: bytes, folder: str, suffix: str) -> str:
        file_id = f"file-{next(self._file_ids)}"
        self.files[file_id] = data
        self._file_paths[f"{folder}/{file_id}.{suffix}"] = file_id
        return file_id

    async def _sends(
        self, chat_id: int, media: dict[str, Any], caption: str, user: int
    ) -> FakeMessage:
        message = self._add(self.chat(chat_id), caption, user)
        message.media = media
        self._queue("message", message)
        await self._notify()
        return message

    async def hand_over_again(self, message: FakeMessage) -> None:
        """Queue a new update carrying `message` again (as after a lost confirmation)."""
        self._queue("message", message)
        await self._notify()

    def pending_updates(self) -> list[dict[str, Any]]:
        """Updates not confirmed yet, oldest first."""
        return [u for u in self._updates if u["update_id"] > self.confirmed]

    # -- what users see -------------------------------------------------------------

    def view(self, chat_id: int, topic: int | None = None) -> list[FakeMessage]:
        """The visible messages of a chat (or of one topic: 0 is General), oldest first."""
        return [
            m
            for m in self.messages.get(chat_id, [])
            if not m.deleted and (topic is None or m.topic == topic)
        ]

    def bot_messages(self, chat_id: int, topic: int | None = None) -> list[FakeMessage]:
        """The bot's visible messages in a chat (or topic), oldest first."""
        return [m for m in self.view(chat_id, topic) if m.sender == BOT_ID]

    def bot_texts(self, chat_id: int, topic: int | None = None) -> list[str]:
        """What the user reads from the bot, message by message."""
        return [m.text for m in self.bot_messages(chat_id, topic)]

    def replies_to(self, message: FakeMessage) -> list[FakeMessage]:
        """The bot's messages that reply to `message`."""
        return [m for m in self.bot_messages(message.chat.id) if m.reply_to is message]

    def draft(self, chat_id: int, topic: int = 0) -> str:
        """The bot's draft shown in the chat now ("" when none)."""
        return self.drafts.get((chat_id, topic), "")

    # -- scripting ------------------------------------------------------------------

    def fail_next(
        self,
        method: str,
        *,
        status: int = 400,
        description: str = "Bad Request",
        retry_after: int | None = None,
        times: int = 1,
    ) -> None:
        """Refuse the next `times` calls of `method` (nothing is carried out)."""
        queue = self._faults.setdefault(method, deque())
        queue.extend(_Fault(status, description, retry_after, False, False) for _ in range(times))

    def drop_next(self, method: str, *, commit: bool = False, times: int = 1) -> None:
        """Close the connection of the next `times` calls without an answer; `commit`:
        after carrying the call out (the caller cannot tell which)."""
        queue = self._faults.setdefault(method, deque())
        queue.extend(_Fault(0, "", None, True, commit) for _ in range(times))

    def cut_next(self, method: str = "file") -> None:
        """Send half the next answer's body (its full length announced), then close."""
        self._faults.setdefault(method, deque()).append(_Fault(0, "", None, False, False, True))

    def bot_files(self, chat_id: int, topic: int | None = None) -> list[tuple[str, bytes]]:
        """(name, bytes) of each file the bot posted in the chat, in order."""
        return [
            (m.file_name, self.files[m.file_id])
            for m in self.bot_messages(chat_id, topic)
            if m.file_id
        ]

    def hold_next(self, method: str) -> None:
        """Keep the next call of `method` waiting until `let_go()`, then carry it out."""
        self._holds[method] = self._holds.get(method, 0) + 1

    def let_go(self) -> None:
        """Carry out the calls held by `hold_next` (and hold no later ones)."""
        self._let_go.set()

    def rate_limit(
        self,
        *,
        per_chat: tuple[int, float] | None = None,
        per_group: tuple[int, float] | None = None,
        overall: tuple[int, float] | None = None,
        retry_after: int = 1,
    ) -> None:
        """Flood control on sends and edits: (calls, seconds) windows, real time; past
        one, 429 with `retry_after`."""
        for scope, window in (("chat", per_chat), ("group", per_group), ("overall", overall)):
            if window is not None:
                self._windows[scope] = window
        self._retry_after = retry_after

    def calls(self, method: str | None = None) -> list[RecordedCall]:
        """The calls received (of one method, or all), oldest first."""
        return [c for c in self._calls if method is None or c.method == method]

    # -- webhook delivery -----------------------------------------------------------

    async def post_update(self, url: str, update: Mapping[str, Any], secret: str | None) -> int:
        """POST one update to `url` as Telegram does (with `secret` in the header unless
        None); the HTTP status the bot answered."""
        headers = {} if secret is None else {"X-Telegram-Bot-Api-Secret-Token": secret}
        async with (
            aiohttp.ClientSession() as session,
            session.post(url, json=dict(update), headers=headers) as response,
        ):
            await response.read()
            return response.status

    async def _push(self) -> None:
        """Deliver updates to the webhook one at a time, each until it is answered 200."""
        while True:
            pending = self.pending_updates()
            if not pending or not self.webhook_url:
                async with self._changed:
                    await self._changed.wait()
                continue
            update = pending[0]
            self.pushes += 1
            await self._notify()
            try:
                status = await self.post_update(self.webhook_url, update, self.webhook_secret)
            except (aiohttp.ClientError, OSError):
                status = 0
            if status == 200:
                self.confirmed = max(self.confirmed, int(update["update_id"]))
                await self._notify()
            else:
                await asyncio.sleep(0.05)

    # -- the Bot API ----------------------------------------------------------------

    async def _params(self, request: web.Request) -> dict[str, Any]:
        params: dict[str, Any] = dict(request.query)
        if request.content_type == "multipart/form-data":
            for key, value in (await request.post()).items():
                if isinstance(value, web.FileField):
                    params[key] = FakeUpload(value.filename, value.content_type, value.file.read())
                else:
                    params[key] = value
        elif request.can_read_body:
            raw = await request.read()
            if request.content_type == "application/json":
                params.update(json.loads(raw or b"{}"))
            elif raw:
                params.update(parse_qsl(raw.decode()))
        return params

    async def _api(self, request: web.Request) -> web.StreamResponse:
        method = request.match_info["method"]
        if request.match_info["token"] != self.token:
            return _error(401, "Unauthorized")
        try:
            params = await self._params(request)
        except ValueError:
            return _error(400, "Bad Request: invalid JSON")
        self._calls.append(RecordedCall(method, params))
        if self._holds.get(method, 0) > 0:
            self._holds[method] -= 1
            self.holding += 1
            await self._notify()
            await self._let_go.wait()
        fault = self._take_fault(method)
        if fault is not None and not fault.drop:
            await self._notify()
            if fault.status >= 500:
                return web.Response(status=fault.status, text="Bad Gateway")
            self.refused.append((method, fault.description))
            return _error(fault.status, fault.description, fault.retry_after)
        if fault is not None and not fault.commit:
            return self._drop(request)
        try:
            self._admit(method, params)
            if method == "getUpdates":
                result: Any = await self._get_updates(params)
            else:
                handler = _METHODS.get(method)
                if handler is None:
                    raise _Refusal(404, "Not Found")
                result = handler(self, params)
        except _Refusal as refusal:
            if refusal.status != 429:
                self.refused.append((method, refusal.description))
            await self._notify()
            return _error(
                refusal.status, refusal.description, refusal.retry_after, refusal.migrate_to_chat_id
            )
        await self._notify()
        if fault is not None:
            return self._drop(request)
        return web.json_response({"ok": True, "result": result})

    def _drop(self, request: web.Request) -> web.StreamResponse:
        assert request.transport is not None
        request.transport.close()
        raise asyncio.CancelledError

    def _take_fault(self, method: str) -> _Fault | None:
        queue = self._faults.get(method)
        return queue.popleft() if queue else None

    def _admit(self, method: str, params: Mapping[str, Any]) -> None:
        if method not in _SENDS or not self._windows:
            return
        chat_id = _int(params.get("chat_id"))
        chat = self.chats.get(chat_id)
        now = time.monotonic()
        scopes = [("overall", 0), ("chat", chat_id)]
        if chat is not None and chat.kind != "private":
            scopes.append(("group", chat_id))
        for scope, key in scopes:
            window = self._windows.get(scope)
            if window is None:
                continue
            stamps = self._stamps.setdefault((scope, key), _Window(*window))
            if not stamps.admit(now):
                self.throttled.append((method, chat_id))
                retry = self._retry_after
                raise _Refusal(429, f"Too Many Requests: retry after {retry}", retry)

    def _target(self, params: Mapping[str, Any]) -> tuple[FakeChat, int]:
        chat = self.chats.get(_int(params.get("chat_id")))
        if chat is None:
            raise _Refusal(400, "Bad Request: chat not found")
        if chat.migrated_to:
            raise _Refusal(
                400,
                "Bad Request: group chat was upgraded to a supergroup chat",
                migrate_to_chat_id=chat.migrated_to,
            )
        topic = _int(params.get("message_thread_id"))
        if topic and chat.forum and topic not in chat.topics:
            raise _Refusal(400, "Bad Request: message thread not found")
        return chat, topic

    def _parsed(self, params: Mapping[str, Any], key: str = "text") -> str:
        source = str(params.get(key) or "")
        mode = str(params.get("parse_mode") or "")
        if mode.upper() == "HTML":
            shown = _parse_html(source)
        elif mode:
            raise _Refusal(400, f"Bad Request: unsupported parse_mode {mode}")
        else:
            shown = source
        if not shown.strip():
            raise _Refusal(400, "Bad Request: message text is empty")
        if len(shown) > TEXT_LIMIT:
            raise _Refusal(400, "Bad Request: message is too long")
        return shown

    async def _get_updates(self, params: Mapping[str, Any]) -> list[dict[str, Any]]:
        if self.webhook_url:
            raise _Refusal(
                409, "Conflict: can't use getUpdates method while webhook is active; "
                "use deleteWebhook to delete the webhook first"
            )  # fmt: skip
        self.polls += 1
        self._allow(params)
        await self._notify()
        offset = _int(params.get("offset"))
        if offset:
            self.confirmed = max(self.confirmed, offset - 1)
        limit = max(1, min(100, _int(params.get("limit")) or 100))
        timeout = float(params.get("timeout") or 0)
        previous, self._poller = self._poller, asyncio.get_running_loop().create_future()
        if previous is not None and not previous.done():
            previous.set_result(None)  # a newer poll ends the older one (409 there)
        mine = self._poller
        try:
            async with asyncio.timeout(timeout):
                async with self._changed:
                    await self._changed.wait_for(
                        lambda: bool(self.pending_updates()) or mine.done() or self._closing
                    )
        except TimeoutError:
            pass
        if mine.done() and self._poller is not mine:
            raise _Refusal(409, "Conflict: terminated by other getUpdates request")
        updates = self.pending_updates()[:limit]
        if updates:
            self.handed = max(self.handed, int(updates[-1]["update_id"]))
        return updates

    def _get_me(self, params: Mapping[str, Any]) -> dict[str, Any]:
        return {
            "id": self.bot_id,
            "is_bot": True,
            "first_name": "ore",
            "username": self.username,
            "can_join_groups": True,
            "can_read_all_group_messages": False,
        }

    def _set_webhook(self, params: Mapping[str, Any]) -> bool:
        url = str(params.get("url") or "")
        if url and not url.startswith(("http://", "https://")):
            raise _Refusal(400, "Bad Request: bad webhook: invalid URL")
        self.webhook_url = url
        self.webhook_secret = str(params.get("secret_token") or "")
        self._allow(params)
        if url and self._pusher is None:
            self._pusher = asyncio.get_running_loop().create_task(self._push())
        return True

    def _delete_webhook(self, params: Mapping[str, Any]) -> bool:
        self.webhook_url = ""
        return True

    def _webhook_info(self, params: Mapping[str, Any]) -> dict[str, Any]:
        return {"url": self.webhook_url, "pending_update_count": len(self.pending_updates())}

    def _send_message(self, params: Mapping[str, Any]) -> dict[str, Any]:
        chat, topic = self._target(params)
        shown = self._parsed(params)
        reply_to = None
        reply = params.get("reply_parameters")
        if isinstance(reply, str):
            reply = json.loads(reply)
        if isinstance(reply, Mapping):
            wanted = _int(reply.get("message_id"))
            reply_to = next((m for m in self.messages[chat.id] if m.message_id == wanted), None)
            if reply_to is None and not reply.get("allow_sending_without_reply"):
                raise _Refusal(400, "Bad Request: message to be replied not found")
        message = self._add(chat, shown, BOT_ID, sender_is_bot=True, topic=topic, reply_to=reply_to)
        message.source = str(params.get("text") or "")
        message.parse_mode = str(params.get("parse_mode") or "")
        self.drafts.pop((chat.id, topic), None)  # a real message ends the draft
        return message.to_json()

    def _send_photo(self, params: Mapping[str, Any]) -> dict[str, Any]:
        return self._send_file(params, "photo")

    def _send_document(self, params: Mapping[str, Any]) -> dict[str, Any]:
        return self._send_file(params, "document")

    def _send_file(self, params: Mapping[str, Any], kind: str) -> dict[str, Any]:
        chat, topic = self._target(params)
        upload = params.get(kind)
        if not isinstance(upload, FakeUpload):
            raise _Refusal(400, f"Bad Request: there is no {kind} in the request")
        size = len(upload.data)
        if size > UPLOAD_LIMIT:
            raise _Refusal(413, "Request Entity Too Large")
        if kind == "photo" and size > PHOTO_LIMIT:
            raise _Refusal(400, "Bad Request: file is too big")
        caption = self._parsed(params, "caption") if params.get("caption") else ""
        message = self._add(chat, caption, BOT_ID, sender_is_bot=True, topic=topic)
        suffix = upload.name.rpartition(".")[2] or "bin"
        message.file_id = self._keep(upload.data, f"{kind}s", suffix)
        message.file_name = upload.name
        described: dict[str, Any] = {"file_id": message.file_id, "file_size": size}
        described["file_unique_id"] = message.file_id
        if kind == "photo":
            message.media = {"photo": [described]}
        else:
            described |= {"file_name": upload.name, "mime_type": upload.media_type}
            message.media = {"document": described}
        return message.to_json()

    def _message(self, params: Mapping[str, Any]) -> FakeMessage:
        chat = self.chats.get(_int(params.get("chat_id")))
        wanted = _int(params.get("message_id"))
        for message in self.messages.get(chat.id if chat else 0, []):
            if message.message_id == wanted and not message.deleted:
                return message
        raise _Refusal(400, "Bad Request: message to edit not found")

    def _edit(self, params: Mapping[str, Any]) -> dict[str, Any]:
        message = self._message(params)
        if message.sender != BOT_ID:
            raise _Refusal(400, "Bad Request: message can't be edited")
        shown = self._parsed(params)
        mode = str(params.get("parse_mode") or "")
        if shown == message.text and mode == message.parse_mode:
            raise _Refusal(
                400, "Bad Request: message is not modified: specified new message content "
                "and reply markup are exactly the same as a current content and reply "
                "markup of the message"
            )  # fmt: skip
        message.text = shown
        message.source = str(params.get("text") or "")
        message.parse_mode = mode
        message.edits += 1
        return message.to_json()

    def _draft(self, params: Mapping[str, Any]) -> bool:
        chat, topic = self._target(params)
        if chat.kind != "private":
            raise _Refusal(400, "Bad Request: drafts can be sent only to private chats")
        if not _int(params.get("draft_id")):
            raise _Refusal(400, "Bad Request: draft_id must be non-zero")
        self.drafts[(chat.id, topic)] = self._parsed(params)
        return True

    def _chat_action(self, params: Mapping[str, Any]) -> bool:
        chat, topic = self._target(params)
        action = str(params.get("action") or "")
        if action not in _ACTIONS:
            raise _Refusal(400, "Bad Request: wrong parameter action in request")
        self.actions.append((chat.id, topic, action))
        return True

    def _delete(self, params: Mapping[str, Any]) -> bool:
        message = self._message(params)
        message.deleted = True
        return True

    def _set_reaction(self, params: Mapping[str, Any]) -> bool:
        message = self._message(params)
        reaction = params.get("reaction") or []
        if isinstance(reaction, str):
            reaction = json.loads(reaction)
        emoji = [str(r.get("emoji") or "") for r in reaction]
        if len(emoji) > 1:
            raise _Refusal(400, "Bad Request: REACTIONS_TOO_MANY")
        if any(e not in REACTION_EMOJI for e in emoji):
            raise _Refusal(400, "Bad Request: REACTION_INVALID")
        message.bot_reaction = emoji
        return True

    def _set_commands(self, params: Mapping[str, Any]) -> bool:
        commands = params.get("commands") or []
        if isinstance(commands, str):
            commands = json.loads(commands)
        self.commands = list(commands)
        return True

    def _get_file(self, params: Mapping[str, Any]) -> dict[str, Any]:
        file_id = str(params.get("file_id") or "")
        if file_id not in self.files:
            raise _Refusal(400, "Bad Request: invalid file_id")
        path = next(path for path, known in self._file_paths.items() if known == file_id)
        if len(self.files[file_id]) > DOWNLOAD_LIMIT:
            raise _Refusal(400, "Bad Request: file is too big")
        return {
            "file_id": file_id,
            "file_unique_id": file_id,
            "file_size": len(self.files[file_id]),
            "file_path": path,
        }

    async def _file(self, request: web.Request) -> web.StreamResponse:
        if request.match_info["token"] != self.token:
            return web.Response(status=401)
        fault = self._take_fault("file")
        file_id = self._file_paths.get(request.match_info["path"], "")
        data = self.files.get(file_id)
        if fault is not None and fault.cut and data is not None:
            response = web.StreamResponse(headers={"Content-Length": str(len(data))})
            await response.prepare(request)
            await response.write(data[: len(data) // 2])
            await self._notify()
            return self._drop(request)
        if fault is not None:
            await self._notify()
            if fault.drop:
                return self._drop(request)
            if fault.status in (301, 302, 307, 308):  # back to itself: a redirect loop
                return web.Response(status=fault.status, headers={"Location": str(request.url)})
            return web.Response(status=fault.status, text=fault.description)
        if data is None:
            return web.Response(status=404)
        self.downloads.append(file_id)
        await self._notify()
        return web.Response(body=data)


_METHODS: dict[str, Callable[[FakeTelegram, Mapping[str, Any]], Any]] = {
    "getMe": FakeTelegram._get_me,
    "setWebhook": FakeTelegram._set_webhook,
    "deleteWebhook": FakeTelegram._delete_webhook,
    "getWebhookInfo": FakeTelegram._webhook_info,
    "sendMessage": FakeTelegram._send_message,
    "editMessageText": FakeTelegram._edit,
    "sendMessageDraft": FakeTelegram._draft,
    "sendChatAction": FakeTelegram._chat_action,
    "deleteMessage": FakeTelegram._delete,
    "setMyCommands": FakeTelegram._set_commands,
    "setMessageReaction": FakeTelegram._set_reaction,
    "getFile": FakeTelegram._get_file,
    "sendPhoto": FakeTelegram._send_photo,
    "sendDocument": FakeTelegram._send_document,
}


def _error(
    status: int, description: str, retry_after: int | None = None, migrate_to_chat_id: int = 0
) -> web.Response:
    body: dict[str, Any] = {"ok": False, "error_code": status, "description": description}
    if retry_after is not None:
        body["parameters"] = {"retry_after": retry_after}
    if migrate_to_chat_id:
        body["parameters"] = {"migrate_to_chat_id": migrate_to_chat_id}
    return web.json_response(body, status=status)


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def _entities(text: str) -> list[dict[str, Any]]:
    """`bot_command` and `mention` entities, as Telegram marks them in a user's text."""
    found = []
    offset = 0
    for word in text.split(" "):
        if word.startswith("/") and offset == 0:
            found.append({"type": "bot_command", "offset": 0, "length": len(word)})
        elif word.startswith("@") and len(word) > 1:
            found.append({"type": "mention", "offset": offset, "length": len(word)})
        offset += len(word) + 1
    return found


class _Html(HTMLParser):
    """Telegram's HTML: its tags only, balanced; the text with entities resolved."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.text: list[str] = []
        self.open: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in _TAGS:
            raise _Refusal(400, f"Bad Request: can't parse entities: unsupported start tag {tag!r}")
        self.open.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if not self.open or self.open[-1] != tag:
            raise _Refusal(400, f"Bad Request: can't parse entities: unexpected end tag {tag!r}")
        self.open.pop()

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def _parse_html(source: str) -> str:
    parser = _Html()
    parser.feed(source)
    parser.close()
    if parser.open:
        raise _Refusal(
            400, f"Bad Request: can't parse entities: can't find end tag {parser.open[-1]!r}"
        )
    return "".join(parser.text)
