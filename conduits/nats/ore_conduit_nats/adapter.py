"""The bridge's platform adapter: plain NATS subjects as a platform for the SDK's engine.

A conversation is a channel `C`; its messages arrive on `P.C.in` (an interrupt on
`P.C.interrupt`) and every part the engine shows is one message on `P.C.out`, carrying
its key as `Nats-Msg-Id` (a JetStream stream on the subject drops a repeat by itself;
a part posted again after a kill also carries `Ore-Resent: true`). NATS keeps nothing
it published, so the bridge edits and deletes nothing (its capabilities say so: the
engine posts an edit marked edited, and a notice for a delete).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import ClassVar

import structlog
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.errors import Error as NatsError

from ore_conduit_nats.answers import Requests
from ore_conduit_nats.config import NatsBridgeConfig
from ore_conduit_nats.wire import (
    MAX_ID_LENGTH,
    MalformedMessage,
    Reply,
    ReplyKind,
    encode_reply,
    parse_inbound,
)
from ore_core.conduit import (
    BusError,
    Capabilities,
    Inbound,
    Message,
    Part,
    PermissionDenied,
    PlatformContext,
    Refused,
    Sender,
    Transient,
    subscriptions_registered,
)
from ore_core.events import MAX_EVENT_ID_LENGTH, new_event_id
from ore_core.subjects import HEADER_TRACEPARENT
from ore_core.tasks import TaskScope

__all__ = ["Interrupt", "Malformed", "NatsMessage", "NatsPlatform"]

log = structlog.get_logger("ore.conduit.nats")

CAPABILITIES = Capabilities(max_message_length=1024 * 1024, file_max_bytes=None)
"""Plain text, never edited, never split (a reply is one NATS message, up to 1 MiB);
files of any size and type, as references a client fetches itself."""


@dataclass(frozen=True, slots=True, kw_only=True)
class NatsMessage(Message):
    """A message of a channel: `external` is the sender's id (or a fresh one), `inbox`
    the reply inbox of a request ("" for a plain publish), `traceparent` the sender's."""

    external: str
    inbox: str = ""
    traceparent: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Interrupt(Inbound):
    """`P.C.interrupt`: stop the reply being written; `inbox` of a request."""

    inbox: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Malformed(Inbound):
    """A message the bridge cannot read: the sender is told `error`, in the channel's
    order (after the messages before it)."""

    error: str
    inbox: str = ""


class NatsPlatform:
    """The adapter (see the module docstring), for one run of the bridge."""

    capabilities: ClassVar[Capabilities] = CAPABILITIES

    def __init__(self, config: NatsBridgeConfig, context: PlatformContext) -> None:
        self.config = config
        self.context = context
        self.nc = context.client.nc
        prefix_id = f"{context.name}--"
        self.max_channel = MAX_EVENT_ID_LENGTH - MAX_ID_LENGTH - len(prefix_id)
        self._events: asyncio.Queue[Inbound | BusError] = asyncio.Queue()
        self._subscriptions: list[Subscription] = []
        self._unwatch: list[Callable[[], None]] = []
        self.tasks = TaskScope(f"conduit-{context.name}-requests")
        self.requests = Requests(context.client, self.tasks, config.request_timeout, self.publish)

    def subject(self, channel: str, kind: str) -> str:
        """`<prefix>.<channel>.<kind>`."""
        return f"{self.config.prefix}.{channel}.{kind}"

    def event_id(self, channel: str, external: str) -> str:
        """The ore event id of a channel's message: the sender's id, channel-qualified."""
        return f"{self.context.name}-{channel}-{external}"

    async def connect(self) -> None:
        """Subscribe to every channel's `.in` and `.interrupt` (one queue group per
        deployment: replicas share the input); a refused subscription ends `events`."""
        for kind in ("in", "interrupt"):
            self._unwatch.append(
                self.context.client.permissions.watch_subscription(
                    self.subject("*", kind), self._refused
                )
            )
            self._subscriptions.append(
                await self.nc.subscribe(
                    self.subject("*", kind), queue=self.config.durable, cb=self._on_message
                )
            )
        await subscriptions_registered(self.nc)
        log.info("nats bridge listening", subjects=self.subject("*", "in"))

    async def close(self) -> None:
        for unwatch in self._unwatch:
            unwatch()
        for subscription in self._subscriptions:
            try:
                await subscription.unsubscribe()
            except NatsError as exc:  # the connection closed first: nothing left to undo
                log.debug("unsubscribe failed", error=str(exc))
        await self.tasks.aclose()
        await self.requests.close()

    async def events(self) -> AsyncIterator[Inbound]:
        while True:
            item = await self._events.get()
            if isinstance(item, BusError):
                raise item
            yield item

    def _refused(self, error: PermissionDenied) -> None:
        name = self.context.name
        self._events.put_nowait(
            BusError(
                f"conduit {name}: NATS refused to let it subscribe to {error.subject!r}, "
                "so it cannot hear any message: grant its subjects "
                f"({self.subject('*', 'in')}, {self.subject('*', 'interrupt')}; "
                f"`ore auth --conduit {name}` does) and restart the server"
            )
        )

    async def _on_message(self, msg: Msg) -> None:
        channel, _, kind = msg.subject[len(self.config.prefix) + 1 :].rpartition(".")
        self._events.put_nowait(self._read(msg, channel, kind))

    def _read(self, msg: Msg, channel: str, kind: str) -> Inbound:
        """The event of one message of `channel` (a `Malformed` one for bad input)."""
        if kind == "interrupt":
            return Interrupt(conversation=channel, platform_id=new_event_id(), inbox=msg.reply)
        try:
            inbound = parse_inbound(msg.data, msg.headers, max_bytes=self.config.max_bytes)
            if len(channel) > self.max_channel:
                raise MalformedMessage(f"channel name is over {self.max_channel} characters")
        except MalformedMessage as exc:
            return Malformed(conversation=channel, platform_id="", error=str(exc), inbox=msg.reply)
        external = inbound.id or new_event_id()
        return NatsMessage(
            conversation=channel,
            platform_id=self.event_id(channel, external),
            sender=Sender(inbound.name, inbound.user),
            text=inbound.text,
            attachments=inbound.attachments,
            external=external,
            inbox=msg.reply,
            traceparent=(msg.headers or {}).get(HEADER_TRACEPARENT, ""),
        )

    async def post(self, conversation: str, part: Part, key: str) -> str:
        """Publish `part` on the channel's `.out`; its key is its `Nats-Msg-Id`."""
        kind: ReplyKind = "relayed" if part.sender is not None else part.kind
        reply = Reply(
            kind,
            part.text,
            self.context.conversations.known(conversation),
            part.reply_to.removeprefix(f"{self.event_id(conversation, '')}") or None,
            part.severity,
            message_id=key,
            resent=part.repeat,
            attachments=part.attachments,
        )
        await self.publish(self.subject(conversation, "out"), reply)
        return key

    async def edit(self, conversation: str, platform_id: str, part: Part) -> None:
        raise Refused("NATS keeps no message to edit", "refused_unsupported")

    async def delete(self, conversation: str, platform_id: str) -> None:
        raise Refused("NATS keeps no message to delete", "refused_unsupported")

    async def publish(self, subject: str, reply: Reply) -> None:
        """Publish `reply` in the configured output format."""
        body, headers = encode_reply(reply, self.config.output)
        try:
            await self.nc.publish(subject, body, headers=headers)
        except NatsError as exc:
            raise Transient(f"cannot publish to {subject}: {exc}") from exc
