"""PlainNatsClient: a system that speaks plain NATS to the bridge, for tests.

It knows nothing of ore: it publishes text or JSON on `<prefix>.<channel>.in`, asks
with requests, and collects every channel's `.out`. It is also a `FakePlatform` for
ore's conduit conformance kit (a conversation is a channel, a reply one message on
its `.out`), which is how the bridge proves it keeps the conduit contract.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import nats
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.errors import NoRespondersError

from ore_core.conduit import subscriptions_registered

__all__ = ["PlainNatsClient"]

_PROBE_PAUSE = 0.02  # seconds between readiness probes while the bridge starts


class PlainNatsClient:
    """One NATS connection using the bridge; every channel's `.out` is collected from the start.

    `patience` bounds how long a read or a request waits (seconds).
    """

    def __init__(self, nc: Client, *, prefix: str = "bridge", patience: float = 10.0) -> None:
        self.nc = nc
        self.prefix = prefix
        self.patience = patience
        self._out: dict[str, asyncio.Queue[Msg]] = {}

    @classmethod
    async def connect(
        cls, url: str, *, prefix: str = "bridge", patience: float = 10.0
    ) -> PlainNatsClient:
        """Connect and subscribe to `<prefix>.*.out`; `close()` closes the connection."""
        client = cls(
            await nats.connect(url, name="plain-nats-client"), prefix=prefix, patience=patience
        )
        await client.nc.subscribe(client.subject("*", "out"), cb=client._on_out)
        await subscriptions_registered(client.nc)
        return client

    def subject(self, channel: str, kind: str) -> str:
        """`<prefix>.<channel>.<kind>` (kind: in, out, interrupt)."""
        return f"{self.prefix}.{channel}.{kind}"

    async def _on_out(self, msg: Msg) -> None:
        self._queue(msg.subject.split(".")[-2]).put_nowait(msg)

    def _queue(self, channel: str) -> asyncio.Queue[Msg]:
        return self._out.setdefault(channel, asyncio.Queue())

    async def next_out(self, channel: str) -> Msg:
        """The oldest unread message of the channel's `.out` (waits `patience` seconds at most)."""
        return await asyncio.wait_for(self._queue(channel).get(), self.patience)

    async def publish(
        self, channel: str, data: bytes, headers: dict[str, str] | None = None
    ) -> None:
        """Publish `data` on the channel's `.in` (flushed)."""
        await self.nc.publish(self.subject(channel, "in"), data, headers=headers)
        await self.nc.flush()

    async def request(
        self, channel: str, data: bytes, headers: dict[str, str] | None = None
    ) -> Msg:
        """Ask on the channel's `.in`; the bridge's reply (waits `patience` seconds at most)."""
        reply: Msg = await self.nc.request(
            self.subject(channel, "in"), data, timeout=self.patience, headers=headers
        )
        return reply

    async def close(self) -> None:
        """Close the connection."""
        await self.nc.close()

    # -- FakePlatform ----------------------------------------------------------------

    async def wait_until_ready(self) -> None:
        """Return once the bridge listens: it then refuses an empty message with a reply."""
        while True:
            try:
                await self.request("ready-probe", b"")
                return
            except NoRespondersError:
                await asyncio.sleep(_PROBE_PAUSE)

    async def post_user_message(self, conversation: str, text: str, message_id: str) -> None:
        """Publish JSON `{"text", "id"}` on the channel `conversation`."""
        await self.publish(conversation, _json({"text": text, "id": message_id}))

    async def wait_for_reply(self, conversation: str) -> str:
        """The text of the channel's next `.out` message."""
        return (await self._queue(conversation).get()).data.decode()

    async def interrupt(self, conversation: str) -> None:
        """Publish on the channel's `.interrupt`."""
        await self.nc.publish(self.subject(conversation, "interrupt"), b"")
        await self.nc.flush()


def _json(value: Any) -> bytes:
    """JSON as a system that knows nothing of ore writes it."""
    return json.dumps(value).encode()
