"""The fake Discord's gateway: sessions, their numbered events, resume and the faults.

A session lives on after its websocket drops (as Discord keeps it resumable for a
while): every dispatch is numbered in the session and kept, so a RESUME with the last
sequence a client handled replays what came after it. Simplifications: JSON text
frames only (no zlib, no ETF), one shard, no heartbeat timeout on the server side, no
presence or voice, and a session is resumable forever unless `invalidate` ends it.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from dataclasses import dataclass, field
from typing import Any

from aiohttp import WSCloseCode, WSMsgType, web

__all__ = ["FakeGateway", "GatewaySession"]

HEARTBEAT_MS = 41250
GUILDS = 1 << 0
GUILD_MESSAGES = 1 << 9
DIRECT_MESSAGES = 1 << 12
MESSAGE_CONTENT = 1 << 15
PRIVILEGED = (1 << 1) | (1 << 8) | MESSAGE_CONTENT
_GUILD_EVENTS = {"MESSAGE_CREATE", "MESSAGE_UPDATE", "MESSAGE_DELETE"}
_REACTION_EVENTS = {"MESSAGE_REACTION_ADD", "MESSAGE_REACTION_REMOVE"}


@dataclass
class GatewaySession:
    """One identified session: its events so far (for resume) and its open socket."""

    id: str
    intents: int
    events: list[dict[str, Any]] = field(default_factory=list)
    socket: web.WebSocketResponse | None = None

    def wants(self, kind: str, data: dict[str, Any]) -> bool:
        if kind in _REACTION_EVENTS:
            intent = (1 << 10) if data.get("guild_id") else (1 << 13)  # *_MESSAGE_REACTIONS
            return bool(self.intents & intent)
        if kind not in _GUILD_EVENTS:
            return True
        intent = GUILD_MESSAGES if data.get("guild_id") else DIRECT_MESSAGES
        return bool(self.intents & intent)


class FakeGateway:
    """The websocket side of `FakeDiscord` (`GET /gateway`)."""

    def __init__(self, token: str, ready: Any, guilds: Any, changed: Any) -> None:
        self.token = token
        self._ready = ready  # () -> READY payload without the session fields
        self._guilds = guilds  # () -> GUILD_CREATE payloads
        self._changed = changed  # async () -> None: wakes the fake's waiters
        self.sessions: dict[str, GatewaySession] = {}
        self.identified = 0
        self.resumed = 0
        self.heartbeats = 0
        self.close_codes: list[int] = []
        self.message_content_allowed = True
        self.url = ""
        self.readied = 0  # READY or RESUMED sent: a client is listening
        self.session_started = asyncio.Event()
        """Set by every IDENTIFY that starts a session (a test clears it to wait for one)."""
        self._ids = itertools.count(1)
        self._live: dict[web.WebSocketResponse, Any] = {}  # socket -> its transport

    async def handle(self, request: web.Request) -> web.WebSocketResponse:
        socket = web.WebSocketResponse()
        await socket.prepare(request)
        self._live[socket] = request.transport
        try:
            await socket.send_json({"op": 10, "d": {"heartbeat_interval": HEARTBEAT_MS}})
            session: GatewaySession | None = None
            async for frame in socket:
                if frame.type != WSMsgType.TEXT:
                    break
                payload = json.loads(frame.data)
                session = await self._on(socket, payload, session) or session
        finally:
            self._live.pop(socket, None)
            for session in self.sessions.values():
                if session.socket is socket:
                    session.socket = None
        return socket

    async def _on(
        self, socket: web.WebSocketResponse, payload: dict[str, Any], session: GatewaySession | None
    ) -> GatewaySession | None:
        op, data = payload.get("op"), payload.get("d")
        if op == 1:
            self.heartbeats += 1
            await socket.send_json({"op": 11})
        elif op == 2:
            return await self._identify(socket, data or {})
        elif op == 6:
            return await self._resume(socket, data or {})
        return None

    async def _identify(
        self, socket: web.WebSocketResponse, data: dict[str, Any]
    ) -> GatewaySession | None:
        if data.get("token") != self.token:
            await self._close(socket, 4004, "Authentication failed.")
            return None
        intents = int(data.get("intents", 0))
        if intents & MESSAGE_CONTENT and not self.message_content_allowed:
            await self._close(socket, 4014, "Disallowed intent(s).")
            return None
        self.identified += 1
        session = GatewaySession(id=f"fake-session-{next(self._ids)}", intents=intents)
        self.sessions[session.id] = session
        self.session_started.set()
        session.socket = socket
        ready = {**self._ready(), "session_id": session.id, "resume_gateway_url": self.url}
        await self._send(session, "READY", ready)
        for guild in self._guilds():
            await self._send(session, "GUILD_CREATE", guild)
        self.readied += 1
        await self._changed()
        return session

    async def _resume(
        self, socket: web.WebSocketResponse, data: dict[str, Any]
    ) -> GatewaySession | None:
        session = self.sessions.get(str(data.get("session_id")))
        if data.get("token") != self.token or session is None:
            await socket.send_json({"op": 9, "d": False})
            return None
        self.resumed += 1
        session.socket = socket
        after = int(data.get("seq") or 0)
        for event in session.events[after:]:
            await socket.send_json(event)
        await self._send(session, "RESUMED", {})
        self.readied += 1
        await self._changed()
        return session

    async def _send(self, session: GatewaySession, kind: str, data: dict[str, Any]) -> None:
        event = {"op": 0, "t": kind, "s": len(session.events) + 1, "d": data}
        session.events.append(event)
        if session.socket is not None and not session.socket.closed:
            try:
                await session.socket.send_json(event)
            except ConnectionError:
                session.socket = None

    async def dispatch(self, kind: str, data: dict[str, Any]) -> None:
        """Number `kind` in every session that asked for it and send it where connected."""
        for session in list(self.sessions.values()):
            if session.wants(kind, data):
                await self._send(session, kind, data)

    async def _close(self, socket: web.WebSocketResponse, code: int, reason: str) -> None:
        self.close_codes.append(code)
        await socket.close(code=code, message=reason.encode())

    async def drop(self) -> None:
        """Every open socket ends without a close frame (a dropped connection)."""
        for transport in list(self._live.values()):
            if transport is not None:
                transport.abort()

    async def reconnect(self) -> None:
        """Ask every connected client to reconnect (op 7), as Discord does when it moves a
        session: the client resumes."""
        for socket in list(self._live):
            await socket.send_json({"op": 7, "d": None})

    async def invalidate(self) -> None:
        """End every session (op 9, not resumable): the clients identify anew."""
        for session in list(self.sessions.values()):
            socket = session.socket
            del self.sessions[session.id]
            if socket is not None and not socket.closed:
                await socket.send_json({"op": 9, "d": False})

    async def close(self) -> None:
        for socket in list(self._live):
            await socket.close(code=WSCloseCode.GOING_AWAY)

    async def connected(self) -> bool:
        await asyncio.sleep(0)
        return any(s.socket is not None and not s.socket.closed for s in self.sessions.values())
