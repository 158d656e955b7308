"""FakeMatrix: a local Matrix homeserver for tests, a real aiohttp server on 127.0.0.1.

What it serves (client-server API, `/_matrix/client/v3/...`, JSON):

- `GET /versions`, `POST /login` (`m.login.password`; each login a new device and
  access token), `GET /account/whoami`; a missing or unknown token answers 401
  `M_UNKNOWN_TOKEN` (and `revoke(token)` makes a token unknown).
- `GET /sync` with `since` / `next_batch` (`s<position>` of one event stream),
  `timeout` (long polling: waits for the next event of a room of the user; `waiting`
  counts the syncs waiting now) and `full_state` (answered at once, as Synapse does).
  Joined rooms carry `state` (all of it on the first sync, with `full_state`, or when
  the user joined since) and `timeline` (every event since); invited rooms carry
  `invite_state`. Redacted events come with their content stripped.
- `PUT /rooms/{room}/send/{type}/{txnId}` and `PUT /rooms/{room}/redact/{event}/{txnId}`,
  idempotent per (access token, request path): the same txnId answers the same event
  id and makes no second event. A sender not joined (or `forbid`den) gets 403
  `M_FORBIDDEN`, content over 65,536 bytes 413 `M_TOO_LARGE`.
- `POST /join/{room}` (accepts an invite), `GET /rooms/{room}/event/{event}`.
- **Users** (`user_says`, `user_edits`, `user_redacts`, `user_reacts`, `invite`,
  `encrypt`) add events as another client would; **what a user sees**: `view(room,
  thread)`, `bot_texts`, `reactions_on(event)` (annotations not redacted).
- **Scripted faults** by endpoint name (`login`, `whoami`, `sync`, `send`, `redact`,
  `join`, `event`): `fail_next(name, status=429, errcode="M_LIMIT_EXCEEDED",
  retry_after_ms=...)` (any status and errcode: 5xx, `M_UNKNOWN_TOKEN`, ...) and
  `drop_next(name, commit=...)` (the connection closes without an answer, after
  carrying the call out or not); `hold_next(name)` carries the next call out and keeps
  its answer until `let_go()`. `limited` counts the rate limits served (429 with
  `retry_after_ms`), `early` the calls of an endpoint that came while one of its rate
  limits said to wait.

Where it simplifies: one homeserver, no federation, no filters (`filter` is ignored),
no ephemeral events, presence, to-device or account data; room versions and auth rules
are reduced to membership and a per-user deny list; a sync after `since` returns every
event since (never `limited`), and room state in `state` is the whole current state,
not the delta the spec describes; transaction ids are scoped per access token (the
spec scopes them per device; here one token is one device); `origin_server_ts` is the
time of serving.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from ore_conduit_matrix.testing.rooms import Event, Room, Shown, Stream, display_name

__all__ = ["ALICE", "BOT", "PASSWORD", "SERVER", "FakeMatrix", "Shown"]

SERVER = "fake.local"
BOT = f"@ore:{SERVER}"
ALICE = f"@alice:{SERVER}"
PASSWORD = "bot-password"
MAX_EVENT_BYTES = 65536
_PREFIX = "/_matrix/client/v3"
_MEDIA = "/_matrix/client/v1/media"
MAX_UPLOAD = 50 * 1024**2
"""Synapse's default `max_upload_size` (50M)."""
Handler = Callable[[web.Request, str], Awaitable[web.StreamResponse]]


@dataclass
class _Fault:
    status: int
    errcode: str
    error: str
    retry_after_ms: int | None
    drop: bool
    commit: bool


class _MatrixError(Exception):
    def __init__(self, status: int, errcode: str, error: str) -> None:
        super().__init__(error)
        self.status, self.errcode, self.error = status, errcode, error


class FakeMatrix:
    """See the module docstring. `await start()`, `close()`; `url` for the conduit."""

    def __init__(self) -> None:
        self.stream = Stream()
        self.passwords = {BOT: PASSWORD}
        self.tokens: dict[str, tuple[str, str]] = {}  # token -> (user, device)
        self.calls: list[tuple[str, str]] = []  # (endpoint name, path) in order
        self.syncs = 0
        self.waiting = 0  # syncs waiting for news now (long polling)
        self._txns: dict[tuple[str, str], str] = {}  # (token, path) -> event id
        self._faults: dict[str, deque[_Fault]] = {}
        self._holds: dict[str, int] = {}
        self._let_go = asyncio.Event()
        self.holding = 0  # calls held by `hold_next` so far
        self._waits: dict[str, float] = {}  # endpoint -> monotonic time its limit ends
        self.limited = 0  # rate limits served
        self.early = 0  # calls of an endpoint made before its retry_after_ms passed
        self._devices = itertools.count(1)
        self._changed = asyncio.Condition()
        self._runner: web.AppRunner | None = None
        self._closing = False
        self.port = 0
        self.token = self.issue_token(BOT)
        self.media: dict[str, tuple[str, bytes]] = {}  # media id -> (type, bytes)
        self.cut_downloads = 0  # the next downloads send half their bytes, then hang up

    # -- lifetime ---------------------------------------------------------------------

    async def start(self) -> FakeMatrix:
        """Listen on 127.0.0.1 on a free port."""
        app = web.Application(client_max_size=2 * MAX_UPLOAD)
        app.router.add_post("/_matrix/media/v3/upload", self._endpoint("upload", self._upload))
        app.router.add_get(
            _MEDIA + "/download/{server}/{media}", self._endpoint("download", self._download)
        )
        app.router.add_get(
            _MEDIA + "/download/{server}/{media}/{name}", self._endpoint("download", self._download)
        )
        routes: list[tuple[str, str, str, Handler]] = [
            ("POST", "/login", "login", self._login),
            ("GET", "/account/whoami", "whoami", self._whoami),
            ("GET", "/sync", "sync", self._sync),
            ("PUT", "/rooms/{room}/send/{type}/{txn}", "send", self._send),
            ("PUT", "/rooms/{room}/redact/{event}/{txn}", "redact", self._redact),
            ("POST", "/join/{room}", "join", self._join),
            ("GET", "/rooms/{room}/event/{event}", "event", self._event),
        ]
        for method, path, name, handler in routes:
            app.router.add_route(method, _PREFIX + path, self._endpoint(name, handler))
        app.router.add_get("/_matrix/client/versions", self._versions)
        self._runner = web.AppRunner(app, handle_signals=False)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.port = int(self._runner.addresses[0][1])
        return self

    async def close(self) -> None:
        """Stop serving; a waiting sync returns, a held call is let go."""
        self._closing = True
        self._let_go.set()
        await self._notify()
        if self._runner is not None:
            await self._runner.cleanup()

    @property
    def url(self) -> str:
        """The homeserver URL (the conduit's `homeserver`)."""
        return f"http://127.0.0.1:{self.port}"

    def conduit_settings(self, state_dir: str, **extra: Any) -> dict[str, Any]:
        """A `[plugins.matrix]` table pointing the conduit at this fake (password login)."""
        return {
            "homeserver": self.url,
            "user_id": BOT,
            "password": PASSWORD,
            "state_dir": state_dir,
            **extra,
        }

    async def wait_until(self, predicate: Callable[[], bool], within: float = 10.0) -> None:
        """Wait until `predicate()` holds (checked on every change the fake sees)."""
        async with asyncio.timeout(within):
            async with self._changed:
                await self._changed.wait_for(predicate)

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    # -- users, rooms and what they see -------------------------------------------------

    def issue_token(self, user: str = BOT) -> str:
        """A new access token (a new device) of `user`, as a login makes."""
        device = f"DEV{next(self._devices)}"
        token = f"syt_{user.split(':')[0][1:]}_{device}"
        self.tokens[token] = (user, device)
        return token

    def revoke(self, token: str) -> None:
        """The token is unknown from now on (M_UNKNOWN_TOKEN)."""
        self.tokens.pop(token, None)

    async def create_room(
        self,
        *,
        members: tuple[str, ...] = (ALICE,),
        bot: str = "join",
        encrypted: bool = False,
        name: str = "",
    ) -> str:
        """A room made by the first member; the bot `join`ed, `invite`d or not (``);
        its id `!<name>:fake.local` when named."""
        room = self.stream.new_room(members[0], SERVER, name)
        for user in members[1:]:
            self._member(room, user, "join", user)
        if encrypted:
            self._encrypt(room, members[0])
        if bot:
            self._member(room, BOT, bot, members[0] if bot == "invite" else BOT)
        await self._notify()
        return room.room_id

    async def invite(self, room_id: str, user: str = BOT, by: str = ALICE) -> None:
        self._member(self.stream.rooms[room_id], user, "invite", by)
        await self._notify()

    async def encrypt(self, room_id: str, by: str = ALICE) -> None:
        """Turn on end-to-end encryption in the room (it cannot be turned off)."""
        self._encrypt(self.stream.rooms[room_id], by)
        await self._notify()

    def forbid(self, room_id: str, user: str = BOT) -> None:
        """Sends and redactions of `user` in the room are refused with M_FORBIDDEN."""
        self.stream.rooms[room_id].forbidden.add(user)

    async def user_says(
        self,
        room_id: str,
        text: str,
        *,
        user: str = ALICE,
        reply_to: str = "",
        thread: str = "",
    ) -> str:
        """A text message of `user`; `reply_to` an event it answers, `thread` the root
        of the thread it is in. Its event id."""
        content: dict[str, Any] = {"msgtype": "m.text", "body": text}
        relates: dict[str, Any] = {}
        if thread:
            relates = {"rel_type": "m.thread", "event_id": thread, "is_falling_back": not reply_to}
        if reply_to:
            relates["m.in_reply_to"] = {"event_id": reply_to}
        if relates:
            content["m.relates_to"] = relates
        return await self._user_event(room_id, user, "m.room.message", content)

    async def user_edits(self, room_id: str, event_id: str, text: str, *, user: str = ALICE) -> str:
        """An edit (m.replace) of `event_id` to `text`; the edit's event id."""
        content = {
            "msgtype": "m.text",
            "body": f"* {text}",
            "m.new_content": {"msgtype": "m.text", "body": text},
            "m.relates_to": {"rel_type": "m.replace", "event_id": event_id},
        }
        return await self._user_event(room_id, user, "m.room.message", content)

    async def user_redacts(self, room_id: str, event_id: str, *, user: str = ALICE) -> str:
        """`user` removes `event_id`; the redaction's event id."""
        content = {"redacts": event_id}
        return await self._user_event(room_id, user, "m.room.redaction", content)

    async def user_reacts(self, room_id: str, event_id: str, key: str, *, user: str = ALICE) -> str:
        """`user` annotates `event_id` with `key` (m.reaction); the reaction's event id
        (`user_redacts` it to take it back)."""
        relates = {"rel_type": "m.annotation", "event_id": event_id, "key": key}
        return await self._user_event(room_id, user, "m.reaction", {"m.relates_to": relates})

    def reactions_on(self, event_id: str) -> dict[str, list[str]]:
        """The annotations of `event_id` not redacted: key -> senders, in order."""
        shown: dict[str, list[str]] = {}
        for event in self.stream.events:
            relates = event.content.get("m.relates_to") or {}
            if event.type != "m.reaction" or event.redacted_by or event.replays:
                continue
            if relates.get("event_id") == event_id:
                shown.setdefault(str(relates.get("key")), []).append(event.sender)
        return shown

    async def user_sends(self, room_id: str, type_: str, content: dict[str, Any]) -> str:
        """Any event of Alice's (an m.room.encrypted one, a reaction)."""
        return await self._user_event(room_id, ALICE, type_, content)

    async def replay(self, event_id: str) -> None:
        """Hand an event over again (the same event id, later in the stream)."""
        self.stream.replay(event_id)
        await self._notify()

    def view(self, room_id: str, thread: str | None = None) -> list[Shown]:
        """What a member sees in the room's main timeline (or in a thread)."""
        return self.stream.view(room_id, thread)

    def bot_texts(self, room_id: str, thread: str | None = None) -> list[str]:
        """The bot's visible messages there, as plain text (edits applied)."""
        return [s.text for s in self.view(room_id, thread) if s.sender == BOT]

    def events_of(self, room_id: str, type_: str = "m.room.message") -> list[Event]:
        """Every event of that type in the room, edits and redacted ones included."""
        return [e for e in self.stream.events if e.room_id == room_id and e.type == type_]

    def _member(self, room: Room, user: str, membership: str, by: str) -> None:
        content = {"membership": membership, "displayname": display_name(user)}
        self.stream.add(room, "m.room.member", by, content, state_key=user)

    def _encrypt(self, room: Room, by: str) -> None:
        content = {"algorithm": "m.megolm.v1.aes-sha2"}
        self.stream.add(room, "m.room.encryption", by, content, state_key="")

    async def user_sends_file(
        self, room_id: str, name: str, media_type: str, data: bytes, *, user: str = ALICE
    ) -> str:
        """A file of `user` in the media repo and its event (`m.image` for an image,
        else `m.file`), its `body` the file's name; the event id."""
        url = self.store_media(media_type, data)
        msgtype = "m.image" if media_type.startswith("image/") else "m.file"
        content = {
            "msgtype": msgtype,
            "body": name,
            "filename": name,
            "url": url,
            "info": {"mimetype": media_type, "size": len(data)},
        }
        return await self._user_event(room_id, user, "m.room.message", content)

    def store_media(self, media_type: str, data: bytes) -> str:
        """Keep `data` in the media repo; its `mxc://` URI."""
        media_id = f"m{len(self.media) + 1}"
        self.media[media_id] = (media_type, data)
        return f"mxc://{SERVER}/{media_id}"

    def files_of(self, room_id: str) -> list[tuple[str, bytes]]:
        """The files the bot's events in the room carry, (name, bytes), oldest first."""
        found = []
        for event in self.events_of(room_id):
            url = str(event.content.get("url", ""))
            if event.sender == BOT and url.startswith(f"mxc://{SERVER}/"):
                found.append((str(event.content["body"]), self.media[url.rsplit("/", 1)[1]][1]))
        return found

    async def _upload(self, request: web.Request, user: str) -> web.StreamResponse:
        data = await request.read()
        if len(data) > MAX_UPLOAD:
            raise _MatrixError(413, "M_TOO_LARGE", "Upload request body is too large")
        return web.json_response({"content_uri": self.store_media(request.content_type, data)})

    async def _download(self, request: web.Request, user: str) -> web.StreamResponse:
        found = self.media.get(request.match_info["media"])
        if found is None or request.match_info["server"] != SERVER:
            raise _MatrixError(404, "M_NOT_FOUND", "Not found")
        media_type, data = found
        if not self.cut_downloads:
            return web.Response(body=data, content_type=media_type)
        self.cut_downloads -= 1
        answer = web.StreamResponse(headers={"Content-Length": str(len(data))})
        answer.content_type = media_type
        await answer.prepare(request)
        await answer.write(data[: len(data) // 2])
        assert request.transport is not None
        request.transport.abort()
        return answer

    async def _user_event(
        self, room_id: str, user: str, type_: str, content: dict[str, Any]
    ) -> str:
        event = self.stream.add(self.stream.rooms[room_id], type_, user, content)
        await self._notify()
        return event.event_id

    # -- scripted faults ----------------------------------------------------------------

    def fail_next(
        self,
        name: str,
        *,
        status: int = 429,
        errcode: str = "M_LIMIT_EXCEEDED",
        error: str = "Too Many Requests",
        retry_after_ms: int | None = None,
        times: int = 1,
    ) -> None:
        """The next `times` calls of endpoint `name` answer this error."""
        fault = _Fault(status, errcode, error, retry_after_ms, drop=False, commit=False)
        self._faults.setdefault(name, deque()).extend([fault] * times)

    def drop_next(self, name: str, *, commit: bool = False, times: int = 1) -> None:
        """The next `times` calls of `name` lose their connection, done first if `commit`."""
        fault = _Fault(0, "", "", None, drop=True, commit=commit)
        self._faults.setdefault(name, deque()).extend([fault] * times)

    def hold_next(self, name: str) -> None:
        """The next call of `name` is carried out, then its answer waits for `let_go()`:
        a client killed meanwhile never learns the outcome (`holding` counts them)."""
        self._holds[name] = self._holds.get(name, 0) + 1
        self._let_go.clear()

    def let_go(self) -> None:
        """Answer the held calls."""
        self._let_go.set()

    # -- the HTTP side ------------------------------------------------------------------

    def _endpoint(self, name: str, handler: Handler) -> Callable[[web.Request], Awaitable[Any]]:
        async def serve(request: web.Request) -> web.StreamResponse:
            self.calls.append((name, request.path))
            if time.monotonic() < self._waits.get(name, 0.0):
                self.early += 1
            faults = self._faults.get(name)
            fault = faults.popleft() if faults else None
            if fault is not None and fault.retry_after_ms is not None:
                self.limited += 1
                self._waits[name] = time.monotonic() + fault.retry_after_ms / 1000
            try:
                if fault is not None and not fault.drop:
                    raise _MatrixError(fault.status, fault.errcode, fault.error)
                if fault is not None and not fault.commit:
                    return _drop(request)
                user = "" if name == "login" else self._user(request)
                response = await handler(request, user)
                if self._holds.get(name):
                    self._holds[name] -= 1
                    self.holding += 1
                    await self._notify()
                    await self._let_go.wait()
            except _MatrixError as exc:
                body: dict[str, Any] = {"errcode": exc.errcode, "error": exc.error}
                if fault is not None and fault.retry_after_ms is not None:
                    body["retry_after_ms"] = fault.retry_after_ms
                return web.json_response(body, status=exc.status)
            finally:
                await self._notify()
            return _drop(request) if fault is not None else response

        return serve

    def _user(self, request: web.Request) -> str:
        header = request.headers.get("Authorization", "")
        token = header.removeprefix("Bearer ") or request.query.get("access_token", "")
        if token not in self.tokens:
            raise _MatrixError(401, "M_UNKNOWN_TOKEN", "Invalid access token passed.")
        return self.tokens[token][0]

    @staticmethod
    def _token(request: web.Request) -> str:
        return request.headers.get("Authorization", "").removeprefix("Bearer ")

    async def _versions(self, request: web.Request) -> web.StreamResponse:
        return web.json_response({"versions": ["v1.11"]})

    async def _login(self, request: web.Request, _: str) -> web.StreamResponse:
        body = await request.json()
        user = str((body.get("identifier") or {}).get("user") or body.get("user", ""))
        if not user.startswith("@"):
            user = f"@{user}:{SERVER}"
        if body.get("type") != "m.login.password" or self.passwords.get(user) != body.get(
            "password"
        ):
            raise _MatrixError(403, "M_FORBIDDEN", "Invalid username or password")
        token = self.issue_token(user)
        answer = {"user_id": user, "access_token": token, "device_id": self.tokens[token][1]}
        return web.json_response({**answer, "home_server": SERVER})

    async def _whoami(self, request: web.Request, user: str) -> web.StreamResponse:
        device = self.tokens[self._token(request)][1] if self._token(request) else ""
        return web.json_response({"user_id": user, "device_id": device, "is_guest": False})

    async def _sync(self, request: web.Request, user: str) -> web.StreamResponse:
        self.syncs += 1
        since_text = request.query.get("since", "")
        since = int(since_text[1:]) if since_text.startswith("s") else 0
        timeout = int(request.query.get("timeout", "0")) / 1000
        full = request.query.get("full_state") == "true" or not since_text
        if not full and not self._news(user, since) and timeout > 0:  # as Synapse does
            self.waiting += 1
            await self._notify()
            try:
                await self.wait_until(lambda: self._closing or self._news(user, since), timeout)
            except TimeoutError:
                pass
            finally:
                self.waiting -= 1
        body = self._sync_body(user, since, full, self._token(request))
        return web.json_response(body)

    def _news(self, user: str, since: int) -> bool:
        rooms = self.stream.rooms
        return any(
            rooms[e.room_id].membership(user) in ("join", "invite")
            for e in self.stream.since(since)
        )

    def _sync_body(self, user: str, since: int, full: bool, token: str) -> dict[str, Any]:
        join: dict[str, Any] = {}
        invite: dict[str, Any] = {}
        events = self.stream.since(since)
        for room in self.stream.rooms.values():
            membership = room.membership(user)
            news = [e for e in events if e.room_id == room.room_id]
            joined_since = room.state[("m.room.member", user)].position > since if news else False
            if membership == "invite" and (full or joined_since):
                stripped = [
                    {
                        k: v
                        for k, v in e.to_json().items()
                        if k in ("type", "state_key", "content", "sender")
                    }
                    for e in room.state.values()
                ]
                invite[room.room_id] = {"invite_state": {"events": stripped}}
            elif membership == "join" and (full or news):
                state = list(room.state.values()) if full or joined_since else []
                join[room.room_id] = {
                    "state": {"events": [e.to_json(token) for e in state]},
                    "timeline": {
                        "events": [e.to_json(token) for e in news] if since or news else [],
                        "limited": False,
                        "prev_batch": f"s{since}",
                    },
                }
        return {"next_batch": f"s{self.stream.position}", "rooms": {"join": join, "invite": invite}}

    def _room(self, room_id: str, user: str) -> Room:
        room = self.stream.rooms.get(room_id)
        if room is None or room.membership(user) != "join":
            raise _MatrixError(403, "M_FORBIDDEN", f"User {user} not in room {room_id}")
        if user in room.forbidden:
            raise _MatrixError(403, "M_FORBIDDEN", "You don't have permission to post that")
        return room

    async def _send(self, request: web.Request, user: str) -> web.StreamResponse:
        content = await request.json()
        if len(json.dumps(content).encode()) > MAX_EVENT_BYTES:
            raise _MatrixError(413, "M_TOO_LARGE", "event too large")
        return self._idempotent(request, user, request.match_info["type"], content)

    async def _redact(self, request: web.Request, user: str) -> web.StreamResponse:
        body = await request.json()
        content = {"redacts": request.match_info["event"], **body}
        return self._idempotent(request, user, "m.room.redaction", content)

    def _idempotent(
        self, request: web.Request, user: str, type_: str, content: dict[str, Any]
    ) -> web.StreamResponse:
        token, txn = self._token(request), request.match_info["txn"]
        done = self._txns.get((token, request.path))
        if done is None:
            room = self._room(request.match_info["room"], user)
            event = self.stream.add(room, type_, user, content, txn=(token, txn))
            done = self._txns[(token, request.path)] = event.event_id
        return web.json_response({"event_id": done})

    async def _join(self, request: web.Request, user: str) -> web.StreamResponse:
        room = self.stream.rooms.get(request.match_info["room"])
        if room is None or room.membership(user) not in ("invite", "join"):
            raise _MatrixError(403, "M_FORBIDDEN", "You are not invited to this room.")
        if room.membership(user) == "invite":
            self._member(room, user, "join", user)
        return web.json_response({"room_id": room.room_id})

    async def _event(self, request: web.Request, user: str) -> web.StreamResponse:
        room = self._room(request.match_info["room"], user)
        event = self.stream.find(request.match_info["event"])
        if event is None or event.room_id != room.room_id:
            raise _MatrixError(404, "M_NOT_FOUND", "Event not found.")
        return web.json_response({**event.to_json(self._token(request)), "room_id": room.room_id})


def _drop(request: web.Request) -> web.StreamResponse:
    assert request.transport is not None
    request.transport.close()
    return web.Response(status=500)
