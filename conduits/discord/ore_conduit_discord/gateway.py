"""The gateway client: Discord's websocket of events, resumed across restarts.

Why not hikari's: its shard cannot resume a session kept from an earlier process,
and that is what makes a restart lose nothing. Discord keeps a session resumable for
a while after its socket drops and replays every event after the sequence number a
RESUME names; so the conduit stores the session id and the sequence of the last event
the core acknowledged (`Session`), and a conduit killed mid-stream gets, on resume,
exactly the events the core had not yet stored (the core drops repeats by event id).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from ore_conduit_discord.config import MissingToken
from ore_core import OreError
from ore_core.conduit.waiting import across_reconnects

__all__ = ["Dispatch", "Gateway", "Session", "intents"]

log = logging.getLogger(__name__)

GUILDS = 1 << 0
GUILD_MESSAGES = 1 << 9
GUILD_MESSAGE_REACTIONS = 1 << 10
DIRECT_MESSAGES = 1 << 12
DIRECT_MESSAGE_REACTIONS = 1 << 13
MESSAGE_CONTENT = 1 << 15
_KEEP_SESSION = 4900
"""The close code the conduit leaves with: anything but 1000/1001 keeps it resumable."""
_FATAL = {
    4004: "Discord refused the bot token (close 4004): copy it again from the developer portal",
    4010: "Discord refused the shard (close 4010)",
    4011: "Discord wants this bot sharded (close 4011): too many guilds for one connection",
    4012: "Discord refused the gateway version (close 4012)",
    4013: "Discord refused the intents (close 4013)",
    4014: "Discord refused the Message Content intent (close 4014): switch on MESSAGE CONTENT "
    "INTENT on the developer portal's Bot page, or set message_content = false",
}
_FRESH = {4007, 4009}  # invalid sequence, session timed out: identify anew


def intents(message_content: bool) -> int:
    """Guilds, guild messages and DMs and their reactions, and the content of messages
    when allowed."""
    reactions = GUILD_MESSAGE_REACTIONS | DIRECT_MESSAGE_REACTIONS
    wanted = GUILDS | GUILD_MESSAGES | DIRECT_MESSAGES | reactions
    return wanted | MESSAGE_CONTENT if message_content else wanted


@dataclass(frozen=True, slots=True)
class Dispatch:
    """One event: its name (`MESSAGE_CREATE`), payload, and sequence in the session."""

    kind: str
    data: dict[str, Any]
    seq: int


class Session:
    """The resumable session, kept in a small file: its id, the URL to resume at, and
    the highest sequence below which every event is acknowledged (`acknowledge`)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.id = ""
        self.resume_url = ""
        self.seq = 0
        self._done: set[int] = set()
        with contextlib.suppress(FileNotFoundError, ValueError, KeyError):
            saved = json.loads(path.read_text())
            self.id, self.resume_url, self.seq = saved["id"], saved["resume_url"], int(saved["seq"])

    def start(self, session_id: str, resume_url: str, seq: int) -> None:
        self.id, self.resume_url, self.seq = session_id, resume_url, seq
        self._done.clear()
        self._save()

    def forget(self) -> None:
        self.start("", "", 0)

    def acknowledge(self, seq: int) -> None:
        """Event `seq` is stored by the core: move the resume point past every event up
        to the first one still unacknowledged."""
        if seq <= self.seq:
            return
        self._done.add(seq)
        moved = False
        while self.seq + 1 in self._done:
            self.seq += 1
            self._done.discard(self.seq)
            moved = True
        if moved:
            self._save()

    def _save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.path.with_suffix(".tmp")
        temporary.write_text(
            json.dumps({"id": self.id, "resume_url": self.resume_url, "seq": self.seq})
        )
        os.replace(temporary, self.path)


class _Reconnect(Exception):
    """The socket ended in a way that allows connecting again."""


def _passes(error: BaseException) -> bool:
    """Does connecting again cure `error`?"""
    return isinstance(error, _Reconnect | aiohttp.ClientError | ConnectionError | TimeoutError)


class Gateway:
    """Connects, identifies or resumes, beats, and yields dispatches until closed."""

    def __init__(
        self,
        http: aiohttp.ClientSession,
        url: str,
        token: str,
        intents: int,
        session: Session,
        identify_delay: float = 2.0,
    ) -> None:
        self._http = http
        self._url = url
        self._token = token
        self._intents = intents
        self.session = session
        self._identify_delay = identify_delay
        self._socket: aiohttp.ClientWebSocketResponse | None = None
        self._last_seq: int | None = None
        self._acked = True
        self.connections = 0
        self.ready = asyncio.Event()

    def dispatches(self) -> AsyncIterator[Dispatch]:
        """Every event, across reconnects (the SDK's one schedule); OreError for a
        refusal no retry can fix."""
        return across_reconnects(self._connection, "discord gateway", passing=_passes)

    async def close(self) -> None:
        if self._socket is not None and not self._socket.closed:
            await self._socket.close(code=_KEEP_SESSION)

    async def _connection(self) -> AsyncIterator[Dispatch]:
        resuming = bool(self.session.id and self.session.resume_url)
        url = self.session.resume_url if resuming else self._url
        async with self._http.ws_connect(f"{url}?v=10&encoding=json", heartbeat=None) as socket:
            self._socket = socket
            self.connections += 1
            hello = await socket.receive_json()
            interval = hello["d"]["heartbeat_interval"] / 1000
            beating = asyncio.create_task(self._beat(socket, interval))
            try:
                await socket.send_json(self._resume() if resuming else self._identify())
                async for frame in socket:
                    if frame.type != aiohttp.WSMsgType.TEXT:
                        break
                    dispatch = await self._on(json.loads(frame.data))
                    if dispatch is not None:
                        yield dispatch
                self._closed(socket.close_code)
            finally:
                beating.cancel()
                self.ready.clear()

    async def _on(self, payload: dict[str, Any]) -> Dispatch | None:
        op = payload.get("op")
        if op == 0:
            seq = int(payload["s"])
            self._last_seq = seq
            kind, data = payload["t"], payload["d"]
            if kind == "READY":
                self.session.start(data["session_id"], data["resume_gateway_url"], seq)
                self.ready.set()
            elif kind == "RESUMED":
                self.ready.set()
            return Dispatch(kind, data, seq)
        if op == 1 and self._socket is not None:
            await self._socket.send_json({"op": 1, "d": self._last_seq})
        elif op == 11:
            self._acked = True
        elif op == 7:
            raise _Reconnect("Discord asked for a reconnect")
        elif op == 9:
            if not payload.get("d"):
                self.session.forget()
                await asyncio.sleep(self._identify_delay)
            raise _Reconnect("Discord ended the session")
        return None

    def _closed(self, code: int | None) -> None:
        if code in _FATAL:
            error = MissingToken if code == 4004 else OreError
            raise error(_FATAL[code])
        if code in _FRESH:
            self.session.forget()
        raise _Reconnect(f"the socket closed ({code})")

    async def _beat(self, socket: aiohttp.ClientWebSocketResponse, interval: float) -> None:
        """Beat every `interval`; a beat unanswered by the next one means a dead connection
        (Discord's zombie rule): close it, and the loop resumes."""
        self._acked = True
        while not socket.closed:
            await asyncio.sleep(interval)
            if not self._acked:
                await socket.close(code=_KEEP_SESSION)
                return
            self._acked = False
            await socket.send_json({"op": 1, "d": self._last_seq})

    def _identify(self) -> dict[str, Any]:
        properties = {"os": "linux", "browser": "ore", "device": "ore"}
        data = {"token": self._token, "intents": self._intents, "properties": properties}
        return {"op": 2, "d": data}

    def _resume(self) -> dict[str, Any]:
        self._last_seq = self.session.seq
        data = {"token": self._token, "session_id": self.session.id, "seq": self.session.seq}
        return {"op": 6, "d": data}
