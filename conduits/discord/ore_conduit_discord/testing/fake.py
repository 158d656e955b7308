"""FakeDiscord: a local Discord for tests, a real aiohttp server on 127.0.0.1.

What it serves (REST under `/api/v10`, `Authorization: Bot <token>`, JSON):

- `GET /gateway/bot` (the websocket URL of `FakeGateway`), `GET /users/@me`,
  `GET /oauth2/applications/@me`, `PUT /applications/{app}/commands` (bulk overwrite,
  kept in `commands`).
- `POST /channels/{c}/messages` with `nonce` and `enforce_nonce`: the same nonce from
  the same author within `nonce_seconds` returns the message it made, no second one
  (Discord's own rule); `message_reference` for replies; `allowed_mentions` recorded.
  `PATCH` and `DELETE /channels/{c}/messages/{m}` (only its author edits a message;
  the bot deletes any). Each change is dispatched on the gateway as Discord does
  (MESSAGE_CREATE for the bot's own messages too).
- `POST /webhooks/{id}/{token}?wait=true` with `username` and `avatar_url` (the copy
  shows that name), `PATCH|DELETE /webhooks/{id}/{token}/messages/{m}`. Webhooks take
  no nonce (as on Discord).
- `PUT` and `DELETE /channels/{c}/messages/{m}/reactions/{emoji}/@me`: the bot's own
  reaction, idempotent both ways (a change dispatched as MESSAGE_REACTION_ADD/REMOVE,
  the bot's own too, as Discord does).
- `POST /interactions/{id}/{token}/callback` (kept in `interaction_replies`).
- Discord's checks: content of 1-2,000 characters (else 400, code 50035 with the
  field's error), an unknown channel 404 (10003), an unknown message 404 (10008), a
  channel in `forbidden` 403 (50013 Missing Permissions), another author's message
  403 (50005), a wrong token 401. Every answer carries `X-RateLimit-*` headers of its
  route's bucket.

What a user sees: `seen(channel)` lists the messages shown in a channel (author's
name as shown, text), `reactions_on(channel, message)` who reacts with what; users act
with `user_says`, `user_edits`, `user_deletes`, `user_reacts` (add or take back a
reaction), `user_command` (a slash command: INTERACTION_CREATE).

Scripted faults: `fail_next(route, status, retry_after=..., times=...)` (429 with
`retry_after` in the body and `X-RateLimit-*`/`Retry-After` headers, a 5xx, any
status; `limited` counts the 429s served, `early` the calls of a channel that came
while a 429 of that channel said to wait) and `drop_next(route, commit=...)` (the
connection closes without an answer, after carrying the call out or not), for route
"post", "edit", "delete", "webhook" or "*"; the gateway's `drop`, `reconnect` and
`invalidate` (see `FakeGateway`).

Simplifications: one guild, no roles or permissions besides `forbidden`, no rate
limit of its own unless scripted, no embeds or attachments, interactions
answered only with callbacks (no follow-ups), snowflakes that are plain counters.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from aiohttp import web

from ore_conduit_discord.testing.gateway import FakeGateway

__all__ = ["ALICE", "DM", "FakeDiscord", "GENERAL", "GUILD", "RANDOM", "Shown", "TOKEN", "WEBHOOK"]

TOKEN = "MTEwMDAwMDAwMDAwMDAwMDAwMQ.GfAkE1.fake-token-for-tests-0123456789abcd"
BOT_ID = "1100000000000000001"
GUILD = "1200000000000000001"
GENERAL = "1300000000000000001"
RANDOM = "1300000000000000002"
DM = "1300000000000000009"
ALICE = "1000000000000000001"
WEBHOOK = "1400000000000000001"
WEBHOOK_TOKEN = "fake-webhook-token"
LIMIT = 2000
FILE_LIMIT = 10 * 1024**2  # a bot's upload limit without server boosts
_STAMP = "2026-12-07T12:00:00.000000+00:00"


def _stamp(counter: int) -> str:
    """A distinct ISO timestamp per edit (Discord's edited_timestamp)."""
    return f"2026-12-07T12:00:00.{counter % 1_000_000:06d}+00:00"


def _user(uid: str, name: str, *, bot: bool = False) -> dict[str, Any]:
    return {
        "id": uid,
        "username": name,
        "global_name": name.title(),
        "discriminator": "0",
        "avatar": None,
        "bot": bot,
        "public_flags": 0,
    }


@dataclass
class Shown:
    """A message as a user sees it: the author's name shown, the text."""

    id: str
    author: str
    text: str
    reply_to: str = ""


@dataclass
class _Fault:
    status: int = 0
    retry_after: float = 0.0
    drop: bool = False
    commit: bool = False
    hold: bool = False


@dataclass
class _Message:
    payload: dict[str, Any]
    author_id: str
    shown_as: str


@dataclass
class FakeDiscord:
    """The fake's state and server; `async with FakeDiscord() as fake:` starts it."""

    token: str = TOKEN
    nonce_seconds: float = 300.0
    forbidden: set[str] = field(default_factory=set)
    channels: dict[str, str] = field(
        default_factory=lambda: {GENERAL: GUILD, RANDOM: GUILD, DM: ""}
    )  # channel -> its guild ("" for a DM)
    messages: dict[str, dict[str, _Message]] = field(default_factory=dict)
    commands: list[dict[str, Any]] = field(default_factory=list)
    interaction_replies: dict[str, dict[str, Any]] = field(default_factory=dict)
    calls: list[tuple[str, str]] = field(default_factory=list)
    reactions: dict[tuple[str, str], dict[str, list[str]]] = field(default_factory=dict)
    """(channel, message) -> emoji -> the ids of the users reacting with it."""
    url: str = ""

    def __post_init__(self) -> None:
        self.gateway = FakeGateway(self.token, self._ready, self._guilds, self._notify)
        self._change = asyncio.Condition()
        self._release = asyncio.Event()
        self.held = 0
        self._ids = itertools.count(1500000000000000001)
        self._nonces: dict[tuple[str, str, str], tuple[str, float]] = {}
        self._faults: dict[str, list[_Fault]] = {}
        self._waits: dict[str, float] = {}  # bucket -> monotonic time its 429 ends
        self.limited = 0  # 429s served
        self.early = 0  # calls of a bucket made before its 429's retry_after passed
        self._runner: web.AppRunner | None = None
        self.files: dict[str, bytes] = {}  # attachment path -> bytes, served by the fake

    # ---------------------------------------------------------------- server

    async def __aenter__(self) -> FakeDiscord:
        app = web.Application(client_max_size=2 * FILE_LIMIT)  # Discord's own check is below
        app.router.add_get("/gateway", self.gateway.handle)
        app.router.add_get("/attachments/{path:.*}", self._serve_file)
        app.router.add_route("*", "/api/v10/{path:.*}", self._route)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}"
        self.gateway.url = f"ws://127.0.0.1:{port}/gateway"
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.gateway.close()
        if self._runner is not None:
            await self._runner.cleanup()

    @property
    def webhook_url(self) -> str:
        return f"{self.url}/api/webhooks/{WEBHOOK}/{WEBHOOK_TOKEN}"

    def add_channel(self, *, guild: str = GUILD, channel: str = "") -> str:
        """A new text channel of `guild` ("" : a DM), its id (`channel` when given)."""
        channel = channel or str(next(self._ids))
        self.channels[channel] = guild
        return channel

    async def wait_until(self, predicate: Callable[[], bool], within: float = 10.0) -> None:
        """Until `predicate()` holds, checked on every change the fake sees."""
        async with asyncio.timeout(within), self._change:
            await self._change.wait_for(predicate)

    async def _notify(self) -> None:
        async with self._change:
            self._change.notify_all()

    # ---------------------------------------------------------------- faults

    def fail_next(
        self, route: str, status: int, *, retry_after: float = 0.0, times: int = 1
    ) -> None:
        self._faults.setdefault(route, []).extend(
            _Fault(status=status, retry_after=retry_after) for _ in range(times)
        )

    def drop_next(self, route: str, *, commit: bool = False) -> None:
        self._faults.setdefault(route, []).append(_Fault(drop=True, commit=commit))

    def hold_next(self, route: str, *, after: int = 0) -> None:
        """The next call of `route` (after `after` more served as usual) is carried out,
        then its answer waits (`held` counts such calls) until `let_go()`: a client killed
        meanwhile never learns the outcome. A held `download` has sent no byte yet."""
        queue = self._faults.setdefault(route, [])
        queue.extend([_Fault() for _ in range(after)] + [_Fault(hold=True)])

    def let_go(self) -> None:
        self._release.set()

    def _fault(self, route: str) -> _Fault | None:
        for name in (route, "*"):
            if self._faults.get(name):
                return self._faults[name].pop(0)
        return None

    # ---------------------------------------------------------------- views

    def seen(self, channel: str) -> list[Shown]:
        return [
            Shown(
                m.payload["id"],
                m.shown_as,
                m.payload["content"],
                (m.payload.get("message_reference") or {}).get("message_id", ""),
            )
            for m in self.messages.get(channel, {}).values()
        ]

    def reactions_on(self, channel: str, message_id: str) -> dict[str, list[str]]:
        """Who reacts with what on a message: emoji -> user ids (the bot's is BOT_ID)."""
        return {e: list(u) for e, u in self.reactions.get((channel, message_id), {}).items() if u}

    def bot_texts(self, channel: str) -> list[str]:
        return [
            m.payload["content"]
            for m in self.messages.get(channel, {}).values()
            if m.author_id == BOT_ID
        ]

    # ---------------------------------------------------------------- users

    async def user_says(
        self,
        channel: str,
        text: str,
        *,
        reply_to: str = "",
        author: str = ALICE,
        name: str = "alice",
        files: Sequence[tuple[str, str, bytes]] = (),
    ) -> str:
        """A user's message, with `files` (name, media type, bytes) attached: the
        fake serves them at each attachment's `url`."""
        message = self._store(channel, _user(author, name), text, reply_to)
        self._attach(message, files)
        await self._dispatch("MESSAGE_CREATE", self._with_member(message.payload))
        return str(message.payload["id"])

    async def hand_over_again(self, channel: str, message_id: str) -> None:
        """Dispatch MESSAGE_CREATE of a message again (a platform's redelivery)."""
        payload = self.messages[channel][message_id].payload
        await self._dispatch("MESSAGE_CREATE", self._with_member(payload))

    async def user_edits(self, channel: str, message_id: str, text: str) -> None:
        payload = self.messages[channel][message_id].payload
        payload["content"] = text
        payload["edited_timestamp"] = _stamp(next(self._ids))
        await self._dispatch("MESSAGE_UPDATE", self._with_member(payload))

    async def user_deletes(self, channel: str, message_id: str) -> None:
        del self.messages[channel][message_id]
        await self._deleted(channel, message_id)

    async def user_reacts(
        self,
        channel: str,
        message_id: str,
        emoji: str,
        *,
        remove: bool = False,
        author: str = ALICE,
        name: str = "alice",
    ) -> None:
        """A user adds (or, `remove`, takes back) a reaction on a message."""
        await self._react(channel, message_id, emoji, _user(author, name), add=not remove)

    async def user_command(self, channel: str, name: str, *, author: str = ALICE) -> str:
        interaction = str(next(self._ids))
        data: dict[str, Any] = {
            "id": interaction,
            "application_id": BOT_ID,
            "type": 2,
            "token": f"itoken-{interaction}",
            "version": 1,
            "channel_id": channel,
            "data": {"id": "1", "name": name, "type": 1},
        }
        guild = self.channels[channel]
        if guild:
            data |= {"guild_id": guild, "member": {"user": _user(author, "alice"), "nick": None}}
        else:
            data["user"] = _user(author, "alice")
        await self._dispatch("INTERACTION_CREATE", data)
        return interaction

    # ---------------------------------------------------------------- REST

    async def _route(self, request: web.Request) -> web.StreamResponse:
        path = request.match_info["path"]
        parts = path.split("/")
        self.calls.append((request.method, path))
        if parts[0] == "interactions":
            self.interaction_replies[parts[1]] = reply = await request.json()
            await self._notify()
            if request.query.get("with_response") not in ("true", "True"):
                return web.Response(status=204)
            answer = {"id": parts[1], "type": 2, "response_message_ephemeral": True}
            return _json({"interaction": answer, "resource": {"type": reply["type"]}})
        if parts[0] == "webhooks":
            return await self._webhook(request, parts)
        if request.headers.get("Authorization") != f"Bot {self.token}":
            return _error(401, 0, "401: Unauthorized")
        if path == "gateway/bot":
            limit = {"total": 1000, "remaining": 999, "reset_after": 0, "max_concurrency": 1}
            return _json({"url": self.gateway.url, "shards": 1, "session_start_limit": limit})
        if path == "users/@me":
            return _json(_user(BOT_ID, "ore", bot=True) | {"mfa_enabled": False, "flags": 0})
        if path == "oauth2/applications/@me":
            return _json({"id": BOT_ID, "name": "ore", "flags": 0, "bot_public": False})
        if parts[0] == "applications" and parts[-1] == "commands":
            commands = await request.json()
            self.commands = [
                {
                    **c,
                    "id": str(next(self._ids)),
                    "application_id": BOT_ID,
                    "version": "1",
                    "default_member_permissions": None,
                    "type": c.get("type", 1),
                }
                for c in commands
            ]
            return _json(self.commands)
        if parts[0] == "channels" and len(parts) == 7 and parts[4:7:2] == ["reactions", "@me"]:
            return await self._bot_reacts(request, parts[1], parts[3], unquote(parts[5]))
        if parts[0] == "channels" and len(parts) >= 3 and parts[2] == "messages":
            return await self._messages(request, parts[1], parts[3] if len(parts) > 3 else "")
        return _error(404, 0, "404: Not Found")

    async def _messages(
        self, request: web.Request, channel: str, message_id: str
    ) -> web.StreamResponse:
        self._arrived(f"channel-{channel}")
        route = {"POST": "post", "PATCH": "edit", "DELETE": "delete"}.get(request.method, "")
        fault = self._fault(route)
        if fault is not None and fault.status:
            return self._failure(fault, f"channel-{channel}")
        if fault is not None and fault.drop and not fault.commit:
            return _dropped(request)
        if channel not in self.channels:
            return _error(404, 10003, "Unknown Channel")
        if channel in self.forbidden:
            return _error(403, 50013, "Missing Permissions")
        if message_id and message_id not in self.messages.get(channel, {}):
            return _error(404, 10008, "Unknown Message")
        if request.method == "DELETE":
            answer: web.StreamResponse = await self._delete(channel, message_id)
        else:
            body, files = await _form(request)
            invalid = _check_content(body, files)
            if invalid is not None:
                return invalid
            answer = await (
                self._edit(channel, message_id, body, BOT_ID)
                if message_id
                else self._post(channel, body, files)
            )
        return await self._answer(request, fault, answer)

    async def _bot_reacts(
        self, request: web.Request, channel: str, message_id: str, emoji: str
    ) -> web.StreamResponse:
        fault = self._fault("react")
        if fault is not None and fault.status:
            return _failure(fault, f"reactions-{channel}")
        if channel not in self.channels:
            return _error(404, 10003, "Unknown Channel")
        if message_id not in self.messages.get(channel, {}):
            return _error(404, 10008, "Unknown Message")
        bot = _user(BOT_ID, "ore", bot=True)
        await self._react(channel, message_id, emoji, bot, add=request.method == "PUT")
        return web.Response(status=204)

    async def _react(
        self, channel: str, message_id: str, emoji: str, user: dict[str, Any], *, add: bool
    ) -> None:
        """Add or take back `user`'s reaction; a change is dispatched, none is not."""
        people = self.reactions.setdefault((channel, message_id), {}).setdefault(emoji, [])
        if (user["id"] in people) == add:
            return
        if add:
            people.append(user["id"])
        else:
            people.remove(user["id"])
        name, _, custom = emoji.partition(":")
        data: dict[str, Any] = {
            "user_id": user["id"],
            "channel_id": channel,
            "message_id": message_id,
            "emoji": {"id": custom or None, "name": name},
        }
        if self.channels[channel]:
            data["guild_id"] = self.channels[channel]
            if add:
                data["member"] = {"user": user, "nick": None, "roles": [], "joined_at": _STAMP}
        await self._dispatch("MESSAGE_REACTION_ADD" if add else "MESSAGE_REACTION_REMOVE", data)

    async def _post(
        self, channel: str, body: dict[str, Any], files: Sequence[tuple[str, str, bytes]] = ()
    ) -> web.Response:
        nonce = str(body.get("nonce") or "")
        key = (BOT_ID, channel, nonce)
        if nonce and body.get("enforce_nonce"):
            known = self._nonces.get(key)
            if known is not None and time.monotonic() - known[1] < self.nonce_seconds:
                existing = self.messages[channel].get(known[0])
                if existing is not None:
                    return _json(existing.payload, bucket=f"channel-{channel}")
        reply = (body.get("message_reference") or {}).get("message_id", "")
        message = self._store(channel, _user(BOT_ID, "ore", bot=True), body["content"], reply)
        self._attach(message, files)
        if nonce:
            message.payload["nonce"] = nonce
            self._nonces[key] = (message.payload["id"], time.monotonic())
        await self._dispatch("MESSAGE_CREATE", message.payload)
        return _json(message.payload, bucket=f"channel-{channel}")

    async def _edit(
        self, channel: str, message_id: str, body: dict[str, Any], editor: str
    ) -> web.Response:
        message = self.messages[channel][message_id]
        if message.author_id != editor:
            return _error(403, 50005, "Cannot edit a message authored by another user")
        if "content" in body:
            message.payload["content"] = body["content"]
        message.payload["edited_timestamp"] = _stamp(next(self._ids))
        await self._dispatch("MESSAGE_UPDATE", message.payload)
        return _json(message.payload, bucket=f"channel-{channel}")

    async def _delete(self, channel: str, message_id: str) -> web.Response:
        del self.messages[channel][message_id]
        await self._deleted(channel, message_id)
        return web.Response(status=204)

    async def _webhook(self, request: web.Request, parts: list[str]) -> web.StreamResponse:
        if parts[1:3] != [WEBHOOK, WEBHOOK_TOKEN]:
            return _error(404, 10015, "Unknown Webhook")
        self._arrived(f"webhook-{WEBHOOK}")
        fault = self._fault("webhook")
        if fault is not None and fault.status:
            return self._failure(fault, f"webhook-{WEBHOOK}")
        if fault is not None and fault.drop and not fault.commit:
            return _dropped(request)
        channel = request.query.get("thread_id") or GENERAL
        message_id = parts[4] if len(parts) > 4 else ""
        if message_id and message_id not in self.messages.get(channel, {}):
            return _error(404, 10008, "Unknown Message")
        if request.method == "DELETE":
            answer: web.StreamResponse = await self._delete(channel, message_id)
        else:
            body, files = await _form(request)
            invalid = _check_content(body, files)
            if invalid is not None:
                return invalid
            if message_id:
                answer = await self._edit(channel, message_id, body, WEBHOOK)
            else:
                author = _user(WEBHOOK, body.get("username") or "Captain Hook", bot=True)
                author["global_name"] = None  # a webhook's copy shows the username as given
                author["avatar_url"] = body.get("avatar_url", "")
                message = self._store(channel, author, body["content"], "")
                self._attach(message, files)
                message.payload["webhook_id"] = WEBHOOK
                await self._dispatch("MESSAGE_CREATE", message.payload)
                answer = _json(message.payload)
        return await self._answer(request, fault, answer)

    def _failure(self, fault: _Fault, bucket: str) -> web.Response:
        """A scripted failure; a 429 opens its bucket's window, counted in `early`."""
        if fault.status == 429:
            self.limited += 1
            self._waits[bucket] = time.monotonic() + fault.retry_after
        return _failure(fault, bucket)

    def _arrived(self, bucket: str) -> None:
        """Count a call of `bucket` made inside a 429's window."""
        if time.monotonic() < self._waits.get(bucket, 0.0):
            self.early += 1

    async def _answer(
        self, request: web.Request, fault: _Fault | None, answer: web.StreamResponse
    ) -> web.StreamResponse:
        """The answer of a call carried out, unless a fault drops or holds it."""
        if fault is not None and fault.hold:
            await self._hold()
        if fault is not None and fault.drop:
            return _dropped(request)
        return answer

    async def _hold(self) -> None:
        """Wait until `let_go()`, counted in `held`."""
        self.held += 1
        await self._notify()
        await self._release.wait()
        self._release.clear()

    # ---------------------------------------------------------------- state

    def _store(self, channel: str, author: dict[str, Any], text: str, reply_to: str) -> _Message:
        mid = str(next(self._ids))
        payload: dict[str, Any] = {
            "id": mid,
            "channel_id": channel,
            "author": author,
            "content": text,
            "timestamp": _STAMP,
            "edited_timestamp": None,
            "tts": False,
            "mention_everyone": False,
            "mentions": [],
            "mention_roles": [],
            "attachments": [],
            "embeds": [],
            "pinned": False,
            "type": 19 if reply_to else 0,
            "flags": 0,
            "components": [],
        }
        if self.channels[channel]:
            payload["guild_id"] = self.channels[channel]
        if reply_to:
            payload["message_reference"] = {"message_id": reply_to, "channel_id": channel}
        message = _Message(payload, author["id"], author["global_name"] or author["username"])
        self.messages.setdefault(channel, {})[mid] = message
        return message

    def _attach(self, message: _Message, files: Sequence[tuple[str, str, bytes]]) -> None:
        """Attach `files` to `message` as Discord describes them, served at their url."""
        for name, media_type, data in files:
            attachment_id = str(next(self._ids))
            path = f"{message.payload['channel_id']}/{attachment_id}/{name}"
            self.files[path] = data
            message.payload["attachments"].append(
                {
                    "id": attachment_id,
                    "filename": name,
                    "content_type": media_type,
                    "size": len(data),
                    "url": f"{self.url}/attachments/{path}",
                    "proxy_url": f"{self.url}/attachments/{path}",
                }
            )

    def files_of(self, channel: str) -> list[tuple[str, bytes]]:
        """The files the bot's (and its webhook's) messages in the channel carry, (name,
        bytes), oldest first: what it posted, not what users did."""
        return [
            (a["filename"], self.files[a["url"].split("/attachments/", 1)[1]])
            for m in self.messages.get(channel, {}).values()
            if m.author_id in (BOT_ID, WEBHOOK)
            for a in m.payload["attachments"]
        ]

    async def _serve_file(self, request: web.Request) -> web.StreamResponse:
        """An attachment's bytes; a `download` fault sends half of them, then hangs up."""
        data = self.files.get(request.match_info["path"])
        if data is None:
            return web.Response(status=404)
        fault = self._fault("download")
        if fault is not None and fault.hold:
            await self._hold()
        if fault is not None and fault.status:
            return web.Response(status=fault.status)
        if fault is None or not fault.drop:
            return web.Response(body=data)
        answer = web.StreamResponse(headers={"Content-Length": str(len(data))})
        await answer.prepare(request)
        await answer.write(data[: len(data) // 2])
        if request.transport is not None:
            request.transport.abort()
        return answer

    def _with_member(self, payload: dict[str, Any]) -> dict[str, Any]:
        if not payload.get("guild_id"):
            return payload
        return {**payload, "member": {"nick": None, "roles": [], "joined_at": _STAMP}}

    async def _dispatch(self, kind: str, data: dict[str, Any]) -> None:
        await self.gateway.dispatch(kind, data)
        await self._notify()

    async def _deleted(self, channel: str, message_id: str) -> None:
        data = {"id": message_id, "channel_id": channel}
        if self.channels[channel]:
            data["guild_id"] = self.channels[channel]
        await self._dispatch("MESSAGE_DELETE", data)

    def _ready(self) -> dict[str, Any]:
        return {
            "v": 10,
            "user": _user(BOT_ID, "ore", bot=True),
            "private_channels": [],
            "guilds": [{"id": GUILD, "unavailable": True}],
            "application": {"id": BOT_ID, "flags": 0},
        }

    def _guilds(self) -> list[dict[str, Any]]:
        channels = [
            {"id": c, "type": 0, "name": f"channel-{c[-1]}", "guild_id": GUILD}
            for c, g in self.channels.items()
            if g
        ]
        return [
            {
                "id": GUILD,
                "name": "ore test guild",
                "unavailable": False,
                "channels": channels,
                "threads": [],
                "members": [],
                "roles": [],
            }
        ]


def _dropped(request: web.Request) -> web.Response:
    """The connection closes without an answer (the call was carried out or not)."""
    if request.transport is not None:
        request.transport.abort()
    return web.Response(status=204)


async def _form(request: web.Request) -> tuple[dict[str, Any], list[tuple[str, str, bytes]]]:
    """The request's JSON body, or a multipart form's `payload_json` and its `files[n]`
    (name, media type, bytes), each named in the payload's `attachments`."""
    if not request.content_type.startswith("multipart/"):
        return dict(await request.json()), []
    form = await request.post()
    body = dict(json.loads(str(form["payload_json"])))
    files = []
    for described in body.get("attachments", []):
        field = form[f"files[{described['id']}]"]
        assert isinstance(field, web.FileField), "files[n] must be a file"
        files.append((field.filename, field.content_type, field.file.read()))
    return body, files


def _check_content(
    body: dict[str, Any], files: Sequence[tuple[str, str, bytes]] = ()
) -> web.Response | None:
    if sum(len(data) for _, _, data in files) > FILE_LIMIT:
        return _error(413, 40005, "Request entity too large")
    content = body.get("content")
    if content is None or 1 <= len(content) <= LIMIT or (files and not content):
        return None
    problem = "BASE_TYPE_MAX_LENGTH" if content else "BASE_TYPE_REQUIRED"
    errors = {
        "content": {"_errors": [{"code": problem, "message": "Must be 2000 or fewer in length."}]}
    }
    return _error(400, 50035, "Invalid Form Body", errors=errors)


def _json(payload: Any, *, bucket: str = "", status: int = 200) -> web.Response:
    headers = _limits(bucket, remaining=4) if bucket else {}
    return web.Response(
        status=status, text=json.dumps(payload), headers=headers, content_type="application/json"
    )


def _limits(bucket: str, *, remaining: int, reset_after: float = 1.0) -> dict[str, str]:
    return {
        "X-RateLimit-Limit": "5",
        "X-RateLimit-Remaining": str(remaining),
        "X-RateLimit-Reset": f"{time.time() + reset_after:.3f}",
        "X-RateLimit-Reset-After": f"{reset_after:.3f}",
        "X-RateLimit-Bucket": bucket,
    }


def _error(status: int, code: int, message: str, **extra: Any) -> web.Response:
    return web.Response(
        status=status,
        text=json.dumps({"code": code, "message": message, **extra}),
        content_type="application/json",
    )


def _failure(fault: _Fault, bucket: str) -> web.Response:
    if fault.status != 429:
        return _error(fault.status, 0, f"{fault.status}: scripted failure")
    headers = _limits(bucket, remaining=0, reset_after=fault.retry_after)
    headers |= {"Retry-After": str(max(1, round(fault.retry_after))), "X-RateLimit-Scope": "user"}
    body = {
        "message": "You are being rate limited.",
        "retry_after": fault.retry_after,
        "global": False,
    }
    return web.Response(
        status=429, text=json.dumps(body), headers=headers, content_type="application/json"
    )
