"""FakeSlack: a local Slack for tests, a real aiohttp server on 127.0.0.1 (random port).

What it serves:

- **The Web API** (`POST|GET /api/<method>`, JSON or form bodies, `Authorization:
  Bearer`): `auth.test`, `apps.connections.open`, `chat.postMessage`, `chat.update`,
  `chat.delete`, `chat.startStream`, `chat.appendStream`, `chat.stopStream`,
  `assistant.threads.setStatus`, `conversations.replies`, `reactions.add`,
  `reactions.remove` (kept on the message: `FakeMessage.reactions`; `already_reacted`
  and `no_reaction` as Slack answers), and the file upload flow:
  `files.getUploadURLExternal` (an `upload_url` on the fake), the POST of the bytes to
  it, `files.completeUploadExternal` (a bot message in the channel or thread carrying
  the files: `bot_files`). Anything else answers `unknown_method`, so an unplanned call
  shows.
- **Files users share**: `user_shares_file(...)` posts a `file_share` message whose
  `files` have a `url_private_download` on the fake, served only with the bot token in
  `Authorization: Bearer` (`file_token`; any other token gets Slack's HTML login page,
  with status 200 as Slack answers); `cut_next_file()` sends half the next file's body
  and closes the connection.
  Every call is recorded (`calls(method)`). Messages are kept per channel with monotonic
  `ts`, thread, author, text, metadata and stream state. `conversations.replies` lists
  a stream like any message, live or ended: its text so far, no stream state, and
  metadata only once `chat.stopStream` gave it some (`chat.startStream` takes none).
- **Slack's limits**: `msg_too_long` past `text_limit` (4,000) for `text` and
  `markdown_limit` (12,000) for `markdown_text` and a stream's total;
  `message_not_in_streaming_state` after `stream_lifetime` seconds of the fake `clock`
  or after a stop; per-method rate windows (`rate_limit(...)`) answered with HTTP 429
  and `Retry-After`; a rate-limit storm (`storm(method)` until `calm(method)`): every
  call of the method answered 429, however long the test needs, counted in calls.
- **Scripted failures**: `fail_next(method, error=..., status=..., lost_response=True)`;
  a lost response commits the call (the message is posted) and then drops the
  connection without answering.
- **Socket Mode**: `apps.connections.open` (app token) returns `ws://.../link`; the
  socket says `hello`; `deliver(payload)` sends an `events_api` envelope (an
  `interactive` one for `message_shortcut(message, callback_id)`, a message shortcut) and
  `wait_ack(envelope_id)` waits for the app's ack; `disconnect()` asks the app to
  reconnect, `drop_sockets()` cuts the connections. An envelope sent while no socket is
  open is queued and delivered after the next connect as a retry (`retry_attempt` + 1),
  and so is one whose socket closed before the app acknowledged it (as Slack retries an
  unacknowledged event).
- **The Events API**: `post_event(url, payload, signing_secret=...)` signs the raw body
  like Slack (`v0:` + timestamp), optionally stale, tampered or without headers.
- **Users**: `user_says(...)` adds a user's message and delivers its events;
  `edit(...)`, `delete(...)` do the same for edits and deletes; `user_reacts(message,
  name)` adds (or, `remove`, takes back) a user's reaction and delivers its
  `reaction_added` / `reaction_removed` event.
- **What users see**: `rendered_thread(channel, thread_ts)` is the text of every bot
  message in a thread, in order; `pings()` lists bot messages that would notify a
  channel.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import itertools
import json
import tempfile
import time
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

import aiohttp
from aiohttp import web

__all__ = ["FakeClock", "FakeMessage", "FakeSlack", "RecordedCall"]

BOT_TOKEN = "xoxb-fake-bot-token"
APP_TOKEN = "xapp-fake-app-token"
SIGNING_SECRET = "fake-signing-secret"
TEAM = "T0FAKE"
BOT_USER = "UBOT"
BOT_ID = "BBOT"
APP_ID = "AFAKE"

_PINGS = ("<!here", "<!channel", "<!everyone")
_TS_BASE = 1_700_000_000


class FakeClock:
    """A clock that moves only when told (`advance`); `now()` in seconds."""

    def __init__(self, start: float = 1_000.0) -> None:
        self._now = start

    def now(self) -> float:
        """The current fake time."""
        return self._now

    def advance(self, seconds: float) -> None:
        """Move time forward."""
        self._now += seconds


@dataclass
class FakeMessage:
    """One message in a channel, as Slack keeps it."""

    ts: str
    channel: str
    text: str
    user: str = ""
    bot_id: str = ""
    thread_ts: str = ""
    metadata: dict[str, Any] | None = None
    stream: str = ""  # "streaming", "stopped", or "" (not a stream)
    started_at: float = 0.0
    edits: int = 0
    deleted: bool = False
    reactions: set[str] = field(default_factory=set)
    """The bot's reactions on the message (emoji names)."""
    user_reactions: dict[str, set[str]] = field(default_factory=dict)
    """Users' reactions on the message: emoji name -> the users (`user_reacts`)."""
    files: list[dict[str, Any]] = field(default_factory=list)
    """Slack's file objects of the message (`file_share`)."""

    def to_json(self) -> dict[str, Any]:
        """The message as `conversations.replies` shows it."""
        data: dict[str, Any] = {"type": "message", "ts": self.ts, "text": self.text}
        if self.user:
            data["user"] = self.user
        if self.bot_id:
            data["bot_id"] = self.bot_id
        if self.thread_ts:
            data["thread_ts"] = self.thread_ts
        if self.metadata:
            data["metadata"] = self.metadata
        if self.files:
            data["files"] = self.files
        return data


@dataclass(frozen=True)
class RecordedCall:
    """One Web API call the fake received."""

    method: str
    args: Mapping[str, Any]
    token: str


@dataclass
class _Fault:
    error: str | None
    status: int
    lost_response: bool


@dataclass
class _Window:
    limit: int
    seconds: float
    retry_after: int
    stamps: deque[float] = field(default_factory=deque)


class FakeSlack:
    """See the module docstring. `start()` it, `close()` it; `api_url` for the client."""

    def __init__(self, clock: FakeClock | None = None) -> None:
        self.clock = clock or FakeClock()
        self.team = TEAM
        self.bot_token = BOT_TOKEN
        self.app_token = APP_TOKEN
        self.signing_secret = SIGNING_SECRET
        self.bot_user = BOT_USER
        self.bot_id = BOT_ID
        self.text_limit = 4_000
        self.markdown_limit = 12_000
        self.stream_lifetime = 300.0
        self.streams_enabled = True
        self.user_names: dict[str, str] = {}
        """Display names `users.info` answers (by user id); any other user id `Uxyz` is
        named `Xyz`."""
        self.messages: dict[str, list[FakeMessage]] = {}
        self.statuses: list[tuple[str, str, str]] = []  # (channel, thread_ts, status)
        self.acks: list[str] = []
        self.refused: list[tuple[str, str]] = []  # (method, error) of every ok:false answer
        self.throttled: list[str] = []  # methods answered with 429
        self._calls: list[RecordedCall] = []
        self._faults: dict[str, deque[_Fault]] = {}
        self._windows: dict[str, _Window] = {}
        self._storms: dict[str, float] = {}  # method -> Retry-After of every answer
        self._ts = itertools.count(1)
        self._envelopes = itertools.count(1)
        self._event_ids = itertools.count(1)
        self._sockets: set[web.WebSocketResponse] = set()
        self._pending: list[dict[str, Any]] = []  # envelopes waiting for a socket
        # Envelopes sent on a socket and not acknowledged yet, by envelope id: Slack
        # delivers them again (on the next socket) when theirs closes unacknowledged.
        self._unacked: dict[str, tuple[web.WebSocketResponse, dict[str, Any]]] = {}
        self._changed = asyncio.Condition()
        self._runner: web.AppRunner | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self.connections = 0
        self.port = 0
        self._state = tempfile.TemporaryDirectory(prefix="fake-slack-")
        self.state_dir = Path(self._state.name)
        self.file_token = BOT_TOKEN
        """The token the file URLs take (another than the bot's: a wrong token)."""
        self.file_bytes: dict[str, bytes] = {}  # file id -> its bytes
        self.downloads: list[str] = []  # file ids served, in order
        self._uploads: dict[str, tuple[str, int]] = {}  # file id -> (name, length)
        self._file_ids = itertools.count(1)
        self._cut_files = 0

    # -- lifetime -----------------------------------------------------------------

    async def start(self) -> FakeSlack:
        """Listen on 127.0.0.1 on a free port."""
        app = web.Application(client_max_size=64 * 1024 * 1024)  # file uploads
        app.router.add_route("*", "/api/{method}", self._api)
        app.router.add_get("/link", self._link)
        app.router.add_get("/files-pri/{file_id}/{name}", self._serve_file)
        app.router.add_post("/upload/{file_id}", self._receive_file)
        self._runner = web.AppRunner(app, handle_signals=False)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.port = int(self._runner.addresses[0][1])
        return self

    async def close(self) -> None:
        """Close the sockets and stop serving."""
        for socket in list(self._sockets):
            await socket.close()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(self._tasks)
        if self._runner is not None:
            await self._runner.cleanup()
        self._state.cleanup()

    @property
    def api_url(self) -> str:
        """The Web API base URL (trailing slash included) for `AsyncWebClient(base_url=...)`."""
        return f"http://127.0.0.1:{self.port}/api/"

    def conduit_settings(self, **extra: Any) -> dict[str, Any]:
        """A `[plugins.slack]` table pointing the conduit at this fake (its inbox in a
        directory of the fake's, removed by `close()`)."""
        return {
            "api_url": self.api_url,
            "state_dir": str(self.state_dir),
            "bot_token": self.bot_token,
            "app_token": self.app_token,
            "signing_secret": self.signing_secret,
            "ping_interval": 1.0,
            **extra,
        }

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    async def wait_until(self, predicate: Any, within: float = 10.0) -> None:
        """Wait until `predicate()` is true (re-checked on every change the fake sees)."""
        async with asyncio.timeout(within):
            async with self._changed:
                await self._changed.wait_for(predicate)

    # -- scripting ----------------------------------------------------------------

    def fail_next(
        self,
        method: str,
        *,
        error: str | None = None,
        status: int = 200,
        lost_response: bool = False,
        times: int = 1,
    ) -> None:
        """Make the next `times` calls of `method` fail (see the module docstring)."""
        queue = self._faults.setdefault(method, deque())
        queue.extend(_Fault(error, status, lost_response) for _ in range(times))

    def rate_limit(self, method: str, *, limit: int, seconds: float, retry_after: int = 1) -> None:
        """Allow `limit` calls of `method` per `seconds` (real time); then HTTP 429."""
        self._windows[method] = _Window(limit, seconds, retry_after)

    def storm(self, method: str, *, retry_after: float = 1) -> None:
        """Answer every call of `method` with HTTP 429 and `Retry-After` until `calm`.

        A storm lasts as many calls as the test wants (it counts them in `throttled`),
        not a stretch of real time; `retry_after` may be fractional to keep tests short.
        """
        self._storms[method] = retry_after

    def calm(self, method: str) -> None:
        """End the storm on `method`: its calls are carried out again."""
        self._storms.pop(method, None)

    def calls(self, method: str | None = None) -> list[RecordedCall]:
        """The calls received (of one method, or all), oldest first."""
        return [c for c in self._calls if method is None or c.method == method]

    def methods(self) -> list[str]:
        """The names of the calls received, oldest first."""
        return [c.method for c in self._calls]

    # -- what users see -------------------------------------------------------------

    def thread(self, channel: str, thread_ts: str) -> list[FakeMessage]:
        """Every message of a thread (root included), oldest first."""
        return sorted(
            (
                m
                for m in self.messages.get(channel, [])
                if not m.deleted and (m.ts == thread_ts or m.thread_ts == thread_ts)
            ),
            key=lambda m: _ts_key(m.ts),
        )

    def bot_messages(self, channel: str, thread_ts: str | None = None) -> list[FakeMessage]:
        """The bot's messages in a thread (or the whole channel), oldest first."""
        if thread_ts is None:
            found = [m for m in self.messages.get(channel, []) if not m.deleted]
        else:
            found = self.thread(channel, thread_ts)
        return sorted((m for m in found if m.bot_id == self.bot_id), key=lambda m: _ts_key(m.ts))

    def rendered_thread(self, channel: str, thread_ts: str) -> list[str]:
        """What a user reads from the bot in the thread: each message's text, in order."""
        return [_unescape(m.text) for m in self.bot_messages(channel, thread_ts)]

    def channel_level_bot_messages(self, channel: str) -> list[FakeMessage]:
        """Bot messages posted outside any thread (a reply that leaked to the channel)."""
        return [m for m in self.bot_messages(channel) if not m.thread_ts]

    def answers(self, channel: str, thread_ts: str) -> list[str]:
        """The finished answers in a thread: the parts of each joined, in order.

        An answer is finished once its last part carries `"last": true` metadata.
        """
        parts: dict[str, list[tuple[int, str]]] = {}
        finished: list[tuple[float, str]] = []
        for message in self.bot_messages(channel, thread_ts):
            payload = (message.metadata or {}).get("event_payload") or {}
            answer = str(payload.get("answer", ""))
            if not answer:
                continue
            parts.setdefault(answer, []).append((int(payload.get("part", 0)), message.text))
            if payload.get("last"):
                finished.append((_ts_key(message.ts), answer))
        return [
            "\n".join(_unescape(text) for _, text in sorted(parts[answer]))
            for _, answer in sorted(finished)
        ]

    def pings(self) -> list[FakeMessage]:
        """Bot messages that would notify everyone (an unescaped `<!here>`, ...)."""
        return [
            m
            for messages in self.messages.values()
            for m in messages
            if m.bot_id == self.bot_id and any(p in m.text for p in _PINGS)
        ]

    def status_of(self, channel: str, thread_ts: str) -> str:
        """The assistant status last set in a thread ("" when cleared or never set)."""
        for status_channel, status_ts, status in reversed(self.statuses):
            if (status_channel, status_ts) == (channel, thread_ts):
                return status
        return ""

    # -- users ----------------------------------------------------------------------

    def _next_ts(self) -> str:
        return f"{_TS_BASE + next(self._ts)}.000100"

    def add_message(
        self,
        channel: str,
        text: str,
        *,
        user: str = "",
        bot_id: str = "",
        thread_ts: str = "",
        ts: str | None = None,
    ) -> FakeMessage:
        """Put a message into a channel without telling the app (Slack's own state)."""
        message = FakeMessage(
            ts or self._next_ts(), channel, text, user=user, bot_id=bot_id, thread_ts=thread_ts
        )
        self.messages.setdefault(channel, []).append(message)
        return message

    def message_event(self, message: FakeMessage, *, event_type: str = "message") -> dict[str, Any]:
        """The `event` of a new message (`message` or `app_mention`)."""
        event: dict[str, Any] = {
            "type": event_type,
            "channel": message.channel,
            "ts": message.ts,
            "event_ts": message.ts,
            "text": message.text,
            "team": self.team,
            "channel_type": "im" if message.channel.startswith("D") else "channel",
        }
        if message.user:
            event["user"] = message.user
        if message.bot_id:
            event["bot_id"] = message.bot_id
            event["subtype"] = "bot_message"
        if message.thread_ts:
            event["thread_ts"] = message.thread_ts
        return event

    def callback(self, event: Mapping[str, Any], event_id: str | None = None) -> dict[str, Any]:
        """An `event_callback` body around `event`, as the Events API sends it."""
        return {
            "token": "unused-verification-token",
            "team_id": self.team,
            "api_app_id": APP_ID,
            "event": dict(event),
            "type": "event_callback",
            "event_id": event_id or f"Ev{next(self._event_ids):08d}",
            "event_time": int(time.time()),
            "authorizations": [
                {"enterprise_id": None, "team_id": self.team, "user_id": BOT_USER, "is_bot": True}
            ],
            "is_ext_shared_channel": False,
        }

    async def user_says(
        self,
        channel: str,
        text: str,
        *,
        user: str = "UALICE",
        thread_ts: str = "",
        mention: bool = True,
        events: Iterable[str] = ("app_mention", "message"),
    ) -> FakeMessage:
        """A user posts `text` (with the bot's @mention first when `mention`).

        Its events (both `app_mention` and `message` by default, as for an app
        subscribed to both) go over the socket. Returns the message.
        """
        body = f"<@{self.bot_user}> {text}" if mention else text
        message = self.add_message(channel, body, user=user, thread_ts=thread_ts)
        for event_type in events:
            if event_type == "app_mention" and not mention:
                continue
            await self.deliver(self.callback(self.message_event(message, event_type=event_type)))
        return message

    async def user_shares_file(
        self,
        channel: str,
        data: bytes,
        text: str = "",
        *,
        name: str = "file.bin",
        mimetype: str = "application/octet-stream",
        user: str = "UALICE",
        thread_ts: str = "",
        mention: bool = True,
    ) -> FakeMessage:
        """A user shares a file (with `text`, the bot's @mention first when `mention`):
        a `file_share` message whose file the fake serves (module docstring)."""
        body = f"<@{self.bot_user}> {text}" if mention else text
        message = self.add_message(channel, body, user=user, thread_ts=thread_ts)
        message.files = [self._file(data, name, mimetype)]
        event = self.message_event(message)
        event["subtype"] = "file_share"
        event["files"] = message.files
        await self.deliver(self.callback(event))
        return message

    def cut_next_file(self) -> None:
        """Send half the body of the next file asked for, then close the connection."""
        self._cut_files += 1

    def bot_files(self, channel: str, thread_ts: str) -> list[tuple[str, bytes]]:
        """(name, bytes) of each file the bot posted in the thread, in order."""
        return [
            (str(f["name"]), self.file_bytes[str(f["id"])])
            for m in self.bot_messages(channel, thread_ts)
            for f in m.files
        ]

    def _file(self, data: bytes, name: str, mimetype: str) -> dict[str, Any]:
        file_id = f"F{next(self._file_ids):08d}"
        self.file_bytes[file_id] = data
        url = f"http://127.0.0.1:{self.port}/files-pri/{file_id}/{name}"
        return {
            "id": file_id,
            "name": name,
            "title": name,
            "mimetype": mimetype,
            "size": len(data),
            "url_private": url,
            "url_private_download": url,
        }

    async def _serve_file(self, request: web.Request) -> web.StreamResponse:
        token = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        if token != self.file_token:  # Slack shows its sign-in page, with a 200
            return web.Response(text="<html>Sign in to Slack</html>", content_type="text/html")
        file_id = request.match_info["file_id"]
        data = self.file_bytes.get(file_id)
        if data is None:
            return web.Response(status=404)
        if self._cut_files:
            self._cut_files -= 1
            response = web.StreamResponse(headers={"Content-Length": str(len(data))})
            await response.prepare(request)
            await response.write(data[: len(data) // 2])
            assert request.transport is not None
            request.transport.close()
            raise asyncio.CancelledError
        self.downloads.append(file_id)
        await self._notify()
        return web.Response(body=data)

    async def _receive_file(self, request: web.Request) -> web.Response:
        file_id = request.match_info["file_id"]
        if file_id not in self._uploads:
            return web.Response(status=404, text="unknown upload")
        data = await request.read()
        if request.content_type == "multipart/form-data":
            return web.Response(status=400, text="send the bytes as the body")
        length = self._uploads[file_id][1]
        if len(data) != length:
            return web.Response(status=400, text=f"expected {length} bytes, got {len(data)}")
        self.file_bytes[file_id] = data
        return web.Response(text=f"OK - {len(data)}")

    async def message_shortcut(
        self, message: FakeMessage, callback_id: str, *, user: str = "UALICE"
    ) -> str:
        """A user picks the message shortcut `callback_id` on `message`: its
        `message_action` payload goes over the socket as Slack sends it (the message as
        `conversations.replies` shows it, without its metadata, which Slack does not
        promise there). Returns the envelope id."""
        shown = {k: v for k, v in message.to_json().items() if k != "metadata"}
        payload = {
            "type": "message_action",
            "callback_id": callback_id,
            "trigger_id": f"trigger-{next(self._event_ids)}",
            "action_ts": f"{time.time():.6f}",
            "message_ts": message.ts,
            "message": shown,
            "channel": {"id": message.channel, "name": message.channel.lower()},
            "team": {"id": self.team, "domain": "fake"},
            "user": {"id": user, "name": user.lower(), "team_id": self.team},
            "response_url": f"http://127.0.0.1:{self.port}/response/{message.ts}",
            "token": "unused-verification-token",
            "is_enterprise_install": False,
            "enterprise": None,
        }
        return await self.deliver(payload, kind="interactive")

    async def user_reacts(
        self, message: FakeMessage, name: str, *, user: str = "UALICE", remove: bool = False
    ) -> None:
        """`user` adds reaction `name` (a short name) to `message`, or takes it back;
        its event goes over the socket."""
        await self.deliver(self.callback(self.reaction_event(message, name, user, remove)))

    def reaction_event(
        self, message: FakeMessage, name: str, user: str, remove: bool = False
    ) -> dict[str, Any]:
        """Change a user's reaction on `message`; the `reaction_added` (or
        `reaction_removed`) event saying so."""
        users = message.user_reactions.setdefault(name, set())
        if remove:
            users.discard(user)
            if not users:
                del message.user_reactions[name]
        else:
            users.add(user)
        author = message.user or (self.bot_user if message.bot_id == self.bot_id else "")
        event: dict[str, Any] = {
            "type": "reaction_removed" if remove else "reaction_added",
            "user": user,
            "reaction": name,
            "item": {"type": "message", "channel": message.channel, "ts": message.ts},
            "event_ts": self._next_ts(),
        }
        if author:
            event["item_user"] = author
        return event

    def edit_event(self, message: FakeMessage, text: str, *, user: str = "") -> dict[str, Any]:
        """Change a message's text; the `message_changed` event saying so."""
        previous = message.to_json()
        message.text = text
        message.edits += 1
        edited = {
            **message.to_json(),
            "edited": {"user": user or message.user, "ts": self._next_ts()},
        }
        return {
            "type": "message",
            "subtype": "message_changed",
            "hidden": True,
            "channel": message.channel,
            "ts": self._next_ts(),
            "event_ts": self._next_ts(),
            "message": edited,
            "previous_message": previous,
            "channel_type": "channel",
        }

    def delete_event(self, message: FakeMessage) -> dict[str, Any]:
        """Delete a message; the `message_deleted` event saying so."""
        message.deleted = True
        return {
            "type": "message",
            "subtype": "message_deleted",
            "hidden": True,
            "channel": message.channel,
            "ts": self._next_ts(),
            "deleted_ts": message.ts,
            "previous_message": message.to_json(),
            "channel_type": "channel",
        }

    # -- Socket Mode ------------------------------------------------------------------

    async def _link(self, request: web.Request) -> web.WebSocketResponse:
        socket = web.WebSocketResponse(autoping=True)
        await socket.prepare(request)
        self._sockets.add(socket)
        self.connections += 1
        await socket.send_json({"type": "hello", "num_connections": len(self._sockets)})
        pending, self._pending = self._pending, []
        for envelope in pending:
            envelope["retry_attempt"] = int(envelope.get("retry_attempt", 0)) + 1
            envelope["retry_reason"] = "timeout"
            await self._send(socket, envelope)
        await self._notify()
        try:
            async for frame in socket:
                if frame.type == aiohttp.WSMsgType.TEXT:
                    data = json.loads(frame.data)
                    if "envelope_id" in data:
                        self.acks.append(str(data["envelope_id"]))
                        self._unacked.pop(str(data["envelope_id"]), None)
                        await self._notify()
        finally:
            self._sockets.discard(socket)
            for envelope_id, (sent_on, envelope) in list(self._unacked.items()):
                if sent_on is socket:  # never acknowledged: Slack retries it
                    del self._unacked[envelope_id]
                    self._pending.append(envelope)
            await self._notify()
        return socket

    async def _send(self, socket: web.WebSocketResponse, envelope: dict[str, Any]) -> None:
        envelope_id = str(envelope["envelope_id"])
        self._unacked[envelope_id] = (socket, envelope)
        try:
            await socket.send_json(envelope)
        except ConnectionResetError:  # closing under us (the app was killed): Slack retries
            if self._unacked.pop(envelope_id, None) is not None:
                self._pending.append(envelope)

    @property
    def connected(self) -> bool:
        """True while an app socket is open."""
        return bool(self._sockets)

    async def wait_connected(self, connections: int = 1, within: float = 10.0) -> None:
        """Wait until the app has opened `connections` sockets in all, and one is open."""
        await self.wait_until(lambda: self.connections >= connections and self.connected, within)

    async def deliver(
        self,
        payload: Mapping[str, Any],
        *,
        retry_attempt: int = 0,
        retry_reason: str = "",
        kind: str = "events_api",
    ) -> str:
        """Send an envelope over the socket (queued if none is open): `events_api`, or
        `interactive` for a shortcut (which the app may answer in its ack)."""
        envelope_id = f"env-{next(self._envelopes)}"
        envelope = {
            "envelope_id": envelope_id,
            "type": kind,
            "accepts_response_payload": kind == "interactive",
            "retry_attempt": retry_attempt,
            "retry_reason": retry_reason,
            "payload": dict(payload),
        }
        socket = next((s for s in self._sockets if not s.closed), None)
        if socket is None:
            self._pending.append(envelope)
            return envelope_id
        await self._send(socket, envelope)
        return envelope_id

    async def wait_ack(self, envelope_id: str, within: float = 3.0) -> None:
        """Wait until the app acknowledged the envelope (Slack's limit is 3 s)."""
        await self.wait_until(lambda: envelope_id in self.acks, within)

    async def disconnect(self, reason: str = "refresh_requested") -> None:
        """Ask the app to reconnect, as Slack does every few hours."""
        for socket in list(self._sockets):
            await socket.send_json({"type": "disconnect", "reason": reason, "debug_info": {}})

    async def drop_sockets(self) -> None:
        """Cut every open socket without a word (a network failure)."""
        for socket in list(self._sockets):
            await socket.close(code=aiohttp.WSCloseCode.GOING_AWAY)

    # -- Events API -------------------------------------------------------------------

    async def post_event(
        self,
        url: str,
        payload: Mapping[str, Any],
        *,
        signing_secret: str | None = None,
        retry_num: int | None = None,
        age: float = 0.0,
        tamper: bool = False,
        signed: bool = True,
    ) -> int:
        """POST `payload` to the app as Slack does; the HTTP status it answered.

        `age` makes the timestamp that many seconds old; `tamper` changes the body after
        signing; `signed=False` sends no signature headers.
        """
        body = json.dumps(payload).encode()
        stamp = str(int(time.time() - age))
        secret = (signing_secret or self.signing_secret).encode()
        signature = (
            "v0="
            + hmac.new(secret, b"v0:" + stamp.encode() + b":" + body, hashlib.sha256).hexdigest()
        )
        headers = {"Content-Type": "application/json"}
        if signed:
            headers["X-Slack-Request-Timestamp"] = stamp
            headers["X-Slack-Signature"] = signature
        if retry_num is not None:
            headers["X-Slack-Retry-Num"] = str(retry_num)
            headers["X-Slack-Retry-Reason"] = "http_timeout"
        if tamper:
            body = body.replace(b'"text": "', b'"text": "tampered ', 1)
        async with (
            aiohttp.ClientSession() as session,
            session.post(url, data=body, headers=headers) as response,
        ):
            await response.read()
            return response.status

    # -- the Web API ------------------------------------------------------------------

    async def _api(self, request: web.Request) -> web.StreamResponse:
        method = request.match_info["method"]
        args: dict[str, Any] = dict(request.query)
        if request.can_read_body:
            raw = await request.read()
            if request.content_type == "application/json":
                args.update(json.loads(raw or b"{}"))
            else:
                args.update(parse_qsl(raw.decode()))
        token = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        token = token or str(args.pop("token", ""))
        self._calls.append(RecordedCall(method, args, token))
        window = self._windows.get(method)
        retry_after: float | None = self._storms.get(method)
        if retry_after is None and window is not None and not self._admit(window):
            retry_after = window.retry_after
        if retry_after is not None:
            self.throttled.append(method)
            await self._notify()
            return web.json_response(
                {"ok": False, "error": "ratelimited"},
                status=429,
                headers={"Retry-After": f"{retry_after:g}"},
            )
        fault = self._take_fault(method)
        if fault is not None and not fault.lost_response:
            await self._notify()
            if fault.status >= 500:
                return web.Response(status=fault.status, text="upstream error")
            return self._refuse(method, fault.error or "internal_error", fault.status)
        try:
            data = self._handle(method, args, token)
        except _Refusal as refusal:
            await self._notify()
            return self._refuse(method, refusal.error, 200)
        await self._notify()
        if fault is not None:  # carried out; the answer is lost on the way
            assert request.transport is not None
            request.transport.close()
            raise asyncio.CancelledError
        return web.json_response({"ok": True, **data})

    def _refuse(self, method: str, error: str, status: int) -> web.Response:
        self.refused.append((method, error))
        return web.json_response({"ok": False, "error": error}, status=status)

    def _admit(self, window: _Window) -> bool:
        now = time.monotonic()
        while window.stamps and window.stamps[0] <= now - window.seconds:
            window.stamps.popleft()
        if len(window.stamps) >= window.limit:
            return False
        window.stamps.append(now)
        return True

    def _take_fault(self, method: str) -> _Fault | None:
        queue = self._faults.get(method)
        return queue.popleft() if queue else None

    def _handle(self, method: str, args: dict[str, Any], token: str) -> dict[str, Any]:
        if method == "apps.connections.open":
            if token != self.app_token:
                raise _Refusal("invalid_auth")
            return {"url": f"ws://127.0.0.1:{self.port}/link"}
        if token != self.bot_token:
            raise _Refusal("invalid_auth" if token else "not_authed")
        handler = _METHODS.get(method)
        if handler is None:
            raise _Refusal("unknown_method")
        return handler(self, args)

    def _message(self, args: Mapping[str, Any]) -> FakeMessage:
        channel, ts = str(args.get("channel", "")), str(args.get("ts", ""))
        for message in self.messages.get(channel, []):
            if message.ts == ts and not message.deleted:
                return message
        raise _Refusal("message_not_found")

    def _content(self, args: Mapping[str, Any], *, required: bool = True) -> str:
        if args.get("markdown_text") is not None:
            if args.get("text") or args.get("blocks"):
                raise _Refusal("invalid_arguments")
            text = str(args["markdown_text"])
            if len(text) > self.markdown_limit:
                raise _Refusal("msg_too_long")
            return text
        if args.get("text") is not None:
            text = str(args["text"])
            if len(text) > self.text_limit:
                raise _Refusal("msg_too_long")
            return text
        if required:
            raise _Refusal("no_text")
        return ""

    def _post(self, args: dict[str, Any]) -> dict[str, Any]:
        text = self._content(args)
        message = self.add_message(
            str(args["channel"]), text, bot_id=self.bot_id, thread_ts=str(args.get("thread_ts", ""))
        )
        message.user = self.bot_user
        message.metadata = _metadata(args.get("metadata"))
        return {"channel": message.channel, "ts": message.ts, "message": message.to_json()}

    def _update(self, args: dict[str, Any]) -> dict[str, Any]:
        message = self._message(args)
        if message.bot_id != self.bot_id:
            raise _Refusal("cant_update_message")
        if message.stream == "streaming":
            raise _Refusal("message_is_streaming")
        message.text = self._content(args)
        message.edits += 1
        if args.get("metadata") is not None:
            message.metadata = _metadata(args["metadata"])
        return {"channel": message.channel, "ts": message.ts, "text": message.text}

    def _delete(self, args: dict[str, Any]) -> dict[str, Any]:
        message = self._message(args)
        message.deleted = True
        return {"channel": message.channel, "ts": message.ts}

    def _start_stream(self, args: dict[str, Any]) -> dict[str, Any]:
        if not self.streams_enabled:
            raise _Refusal("not_allowed_token_type")
        if not args.get("thread_ts"):
            raise _Refusal("invalid_arguments")
        if not str(args["channel"]).startswith("D") and not (
            args.get("recipient_team_id") and args.get("recipient_user_id")
        ):
            raise _Refusal("missing_recipient_team_id_or_recipient_user_id")
        text = self._content(args, required=False)
        message = self.add_message(
            str(args["channel"]), text, bot_id=self.bot_id, thread_ts=str(args["thread_ts"])
        )
        message.user = self.bot_user
        message.stream = "streaming"
        message.started_at = self.clock.now()
        return {"channel": message.channel, "ts": message.ts}

    def _streaming(self, args: Mapping[str, Any]) -> FakeMessage:
        message = self._message(args)
        expired = self.clock.now() - message.started_at > self.stream_lifetime
        if message.stream != "streaming" or expired:
            if expired:
                message.stream = "stopped"
            raise _Refusal("message_not_in_streaming_state")
        return message

    def _append_stream(self, args: dict[str, Any]) -> dict[str, Any]:
        message = self._streaming(args)
        text = self._content(args)
        if len(message.text) + len(text) > self.markdown_limit:
            raise _Refusal("msg_too_long")
        message.text += text
        return {"channel": message.channel, "ts": message.ts}

    def _stop_stream(self, args: dict[str, Any]) -> dict[str, Any]:
        message = self._streaming(args)
        text = self._content(args, required=False)
        if len(message.text) + len(text) > self.markdown_limit:
            raise _Refusal("msg_too_long")
        message.text += text
        message.stream = "stopped"
        if args.get("metadata") is not None:
            message.metadata = _metadata(args["metadata"])
        return {"channel": message.channel, "ts": message.ts}

    def _set_status(self, args: dict[str, Any]) -> dict[str, Any]:
        self.statuses.append(
            (str(args["channel_id"]), str(args["thread_ts"]), str(args.get("status", "")))
        )
        return {}

    def _replies(self, args: dict[str, Any]) -> dict[str, Any]:
        messages = self.thread(str(args["channel"]), str(args["ts"]))
        with_metadata = str(args.get("include_all_metadata", "")).lower() in ("1", "true")
        shown = []
        for message in messages:
            data = message.to_json()
            if not with_metadata:
                data.pop("metadata", None)
            shown.append(data)
        return {"messages": shown, "has_more": False}

    def _upload_url(self, args: dict[str, Any]) -> dict[str, Any]:
        name, length = str(args.get("filename") or ""), int(args.get("length") or 0)
        if not name or length <= 0:
            raise _Refusal("invalid_arguments")
        file_id = f"F{next(self._file_ids):08d}"
        self._uploads[file_id] = (name, length)
        return {"upload_url": f"http://127.0.0.1:{self.port}/upload/{file_id}", "file_id": file_id}

    def _complete_upload(self, args: dict[str, Any]) -> dict[str, Any]:
        files = args.get("files")
        if isinstance(files, str):
            files = json.loads(files)
        if not isinstance(files, list) or not files:
            raise _Refusal("invalid_arguments")
        shared = []
        for item in files:
            file_id = str(item.get("id") or "")
            if file_id not in self._uploads or file_id not in self.file_bytes:
                raise _Refusal("file_not_found")
            name, length = self._uploads[file_id]
            shared.append({"id": file_id, "name": name, "title": item.get("title") or name})
            shared[-1]["size"] = length
        channel = str(args.get("channel_id") or "")
        if channel:
            message = self.add_message(
                channel, "", bot_id=self.bot_id, thread_ts=str(args.get("thread_ts") or "")
            )
            message.user = self.bot_user
            message.files = shared
        return {"files": shared}

    def _auth_test(self, args: dict[str, Any]) -> dict[str, Any]:
        return {
            "url": "https://fake.slack.test/",
            "team": "Fake",
            "user": "ore",
            "team_id": self.team,
            "user_id": self.bot_user,
            "bot_id": self.bot_id,
            "is_enterprise_install": False,
        }

    def _user_info(self, args: dict[str, Any]) -> dict[str, Any]:
        user = str(args.get("user", ""))
        if not user.startswith(("U", "W")):
            raise _Refusal("user_not_found")
        name = self.user_names.get(user, user[1:].title())
        profile = {"display_name": name, "real_name": name}
        return {"user": {"id": user, "name": name.lower(), "profile": profile}}

    def _react(self, args: dict[str, Any]) -> dict[str, Any]:
        message = self._message({"channel": args.get("channel"), "ts": args.get("timestamp")})
        if args.get("name") in message.reactions:
            raise _Refusal("already_reacted")
        message.reactions.add(str(args.get("name")))
        return {}

    def _unreact(self, args: dict[str, Any]) -> dict[str, Any]:
        message = self._message({"channel": args.get("channel"), "ts": args.get("timestamp")})
        if args.get("name") not in message.reactions:
            raise _Refusal("no_reaction")
        message.reactions.discard(str(args.get("name")))
        return {}


class _Refusal(Exception):
    def __init__(self, error: str) -> None:
        super().__init__(error)
        self.error = error


_METHODS = {
    "auth.test": FakeSlack._auth_test,
    "users.info": FakeSlack._user_info,
    "chat.postMessage": FakeSlack._post,
    "chat.update": FakeSlack._update,
    "chat.delete": FakeSlack._delete,
    "chat.startStream": FakeSlack._start_stream,
    "chat.appendStream": FakeSlack._append_stream,
    "chat.stopStream": FakeSlack._stop_stream,
    "assistant.threads.setStatus": FakeSlack._set_status,
    "conversations.replies": FakeSlack._replies,
    "reactions.add": FakeSlack._react,
    "reactions.remove": FakeSlack._unreact,
    "files.getUploadURLExternal": FakeSlack._upload_url,
    "files.completeUploadExternal": FakeSlack._complete_upload,
}


def _metadata(value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    if isinstance(value, str):
        value = json.loads(value)
    return dict(value)


def _ts_key(ts: str) -> float:
    return float(ts)


def _unescape(text: str) -> str:
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
