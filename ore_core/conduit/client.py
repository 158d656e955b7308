"""ConduitClient: what a conduit uses to talk to `ore serve` over NATS (protocol.md).

It maps platform conversations to threads (`lookup_or_create`), sends user messages
(JetStream, de-duplicated by event id, retried with the same id), reads output events
in order without gaps (`events`), and calls the rest of the control API. One client
per conduit process; `name` is the conduit's name, `namespace` (default: the name)
the namespace of its threads and the provenance of what it sends. Every subject it
uses carries the namespace (`ore.in.NS.T`, `ore.out.NS.T`, `ore.api.NS.<method>`) and
its replies arrive on the private inbox `_INBOX_NS`, so a NATS user limited to those
subjects (what `ore auth` writes) is all a conduit needs.

Concurrency: use a client from the event loop that connected it. Its methods may be
called from many tasks at once; each `EventFeed` is read by one task.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import structlog
from nats.aio.client import Client as NatsClient
from nats.errors import (
    ConnectionReconnectingError,
    OutboundBufferLimitError,
)
from nats.errors import Error as NatsError
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js.errors import APIError, NoStreamResponseError

from ore_core import tracing
from ore_core._nats.connection import (
    CONDUIT_FEATURES,
    LIMIT_ERROR_CODES,
    NatsCredentials,
    PermissionWatch,
    check_server,
    connect_nats,
)
from ore_core._nats.publisher import AckedPublisher
from ore_core.conduit.counters import metrics
from ore_core.conduit.feed import Delivery, EventFeed
from ore_core.conduit.requests import ApiRequests
from ore_core.errors import ApiError, BusError
from ore_core.events import (
    DeleteEvent,
    EditEvent,
    EventContext,
    FailureReason,
    InterruptEvent,
    ReactEvent,
    RegenerateEvent,
    ReportStatus,
    UserMessageEvent,
    encode_event,
    new_event_id,
)
from ore_core.files import Attachment, ConduitFiles
from ore_core.ids import validate_thread_id
from ore_core.subjects import (
    DEFAULT_PREFIX,
    Subjects,
    validate_namespace,
)
from ore_core.turn import Turn, turn_from_dict

__all__ = [
    "ConduitClient",
    "Delivery",
    "EventFeed",
    "NatsCredentials",
    "PermissionWatch",
    "Sent",
    "ThreadInfo",
    "ThreadPage",
    "message_id",
]

log = structlog.get_logger("ore.bus.client")

_RETRYABLE = (
    NatsTimeoutError,
    NoStreamResponseError,
    ConnectionReconnectingError,
    OutboundBufferLimitError,
)


def message_id(
    namespace: str, thread_id: str, event_id: str, secret: str | bytes | None = None
) -> str:
    """The `Nats-Msg-Id` of an ingress event: scoped to the thread, keyed by `secret`.

    `T:event_id` without a secret. With one, `T:` + the first 32 hex digits of
    HMAC-SHA256(secret, `NS|T|event_id`): any publisher may set any header, so only a
    keyed id stops another conduit from publishing first with this id and getting the
    real message dropped as a duplicate. The core never relies on the id for
    correctness (it de-duplicates by event id per thread); it only saves work.
    """
    return _message_id(_keyed(secret), namespace, thread_id, event_id)


def _keyed(secret: str | bytes | None) -> hmac.HMAC | None:
    """HMAC-SHA256 keyed with `secret` and fed nothing yet (None without a secret).

    A client keeps one and copies it per message: copying skips the key schedule.
    """
    if not secret:
        return None
    return hmac.new(secret.encode() if isinstance(secret, str) else secret, None, hashlib.sha256)


def _message_id(keyed: hmac.HMAC | None, namespace: str, thread_id: str, event_id: str) -> str:
    if keyed is None:
        return f"{thread_id}:{event_id}"
    digest = keyed.copy()
    digest.update(f"{namespace}|{thread_id}|{event_id}".encode())
    return f"{thread_id}:{digest.hexdigest()[:32]}"


@dataclass(frozen=True, slots=True)
class Sent:
    """What `send` and `interrupt` published: the event, and whether JetStream already had
    it (`duplicate`: a retry or a second send with one id; the core answers it once)."""

    event: (
        UserMessageEvent | InterruptEvent | DeleteEvent | EditEvent | RegenerateEvent | ReactEvent
    )
    duplicate: bool
    sequence: int

    @property
    def id(self) -> str:
        """The event id."""
        return self.event.id


@dataclass(frozen=True, slots=True)
class ThreadInfo:
    """A thread as `threads.get` describes it; `turns` counts stored turns (all branches)."""

    id: str
    current_tip: str
    metadata: dict[str, str]
    turns: int
    namespace: str = ""

    @classmethod
    def from_reply(cls, reply: Mapping[str, Any]) -> ThreadInfo:
        """The thread of a `threads.get` reply."""
        return cls(
            id=str(reply["id"]),
            current_tip=str(reply["current_tip"]),
            metadata=dict(reply["metadata"]),
            turns=int(reply["turns"]),
            namespace=str(reply.get("namespace", "")),
        )


@dataclass(frozen=True, slots=True)
class ThreadPage:
    """One page of `threads.list`; pass `next` as `after` for the following page."""

    threads: list[str]
    next: str | None


Ingress = TypeVar(
    "Ingress",
    UserMessageEvent,
    InterruptEvent,
    DeleteEvent,
    EditEvent,
    RegenerateEvent,
    ReactEvent,
)
"""An ingress event a conduit publishes."""


class MessagesIn:
    """Builds each ingress event; `ConduitClient` publishes it (`_publish`)."""

    namespace: str
    _context: EventContext

    async def _publish(self, thread_id: str, event: Ingress) -> Sent:
        raise NotImplementedError

    async def send(
        self,
        thread_id: str,
        message: str | UserMessageEvent,
        *,
        id: str | None = None,
        user: str | None = None,
        user_name: str | None = None,
        answer: bool = True,
        images: Sequence[str] = (),
        attachments: Sequence[Attachment] = (),
    ) -> Sent:
        """Send a user message to the thread (created on first message if unknown).

        Pass the platform's message id as `id`: a message sent twice with one id is
        stored once (`Sent.duplicate` says so). Retries (timeouts, reconnects, core
        not started yet) reuse the id, for up to `send_deadline` seconds. The event's
        provenance is the namespace (the core refuses any other). `user_name` is the
        sender's display name: linked endpoints label the relayed message with it.
        `answer` false records the message without asking the processor. `images` are
        `data:image/...;base64,` or http(s) URLs (see UserMessageEvent); the whole
        event must fit the core's ingress limit (`nats.max_payload`): a larger one
        raises ApiError 413 `too_large` at once. `attachments` are files `upload`
        returned: the message carries their references, never their bytes.
        """
        if isinstance(message, UserMessageEvent):
            named = (id, user, user_name)
            if any(value is not None for value in named) or not answer or images or attachments:
                raise ValueError(
                    "set id, user, user_name, answer, images and attachments on the "
                    "UserMessageEvent itself"
                )
            event = message
        else:
            event = UserMessageEvent(
                id=id or new_event_id(),
                content=message,
                answer=answer,
                images=tuple(images),
                attachments=tuple(attachments),
                context=self._sender(user, user_name),
            )
        return await self._publish(thread_id, event)

    async def edit(
        self,
        thread_id: str,
        turn_id: str,
        content: str,
        *,
        id: str | None = None,
        user: str | None = None,
        user_name: str | None = None,
        answer: bool = True,
        images: Sequence[str] = (),
        context: EventContext | None = None,
    ) -> Sent:
        """The user edited the message recorded as `turn_id` (its turn id, or the id it
        was sent with: the platform's message id) to `content`. The core interrupts
        what runs, records the new text and tells every endpoint, whose copies are
        edited in place; an edit of the latest message is answered again (unless
        `answer` is false), an older one's on a linked thread is not (docs/bridging.md).
        Pass the platform's id of this edit as `id` (stored once). `context` replaces
        the one made of `user` and `user_name` (a conduit's traceparent, say)."""
        event = EditEvent(
            id=id or new_event_id(),
            turn_id=turn_id,
            content=content,
            answer=answer,
            images=tuple(images),
            context=context or self._sender(user, user_name),
        )
        return await self._publish(thread_id, event)

    async def regenerate(
        self,
        thread_id: str,
        turn_id: str,
        *,
        id: str | None = None,
        user: str | None = None,
        user_name: str | None = None,
        context: EventContext | None = None,
    ) -> Sent:
        """Answer the user message `turn_id` (it, one of its answers, or the id it was
        sent with) again: a sibling answer under the same question; nothing is relayed
        as a new user message. Pass the platform's id of the request as `id`; `context`
        replaces the one made of `user` and `user_name`."""
        event = RegenerateEvent(
            id=id or new_event_id(),
            turn_id=turn_id,
            context=context or self._sender(user, user_name),
        )
        return await self._publish(thread_id, event)

    async def react(
        self,
        thread_id: str,
        turn_id: str,
        emoji: str,
        *,
        remove: bool = False,
        id: str | None = None,
        user: str | None = None,
        user_name: str | None = None,
        context: EventContext | None = None,
    ) -> Sent:
        """The user reacted with `emoji` to the message recorded as `turn_id` (its turn
        id, or the id it was sent with), or took the reaction back (`remove`). The core
        keeps it on the turn, counted once per person and emoji, and tells every
        endpoint; it never starts a model turn. Pass the platform's id of the reaction
        as `id`; `context` replaces the one made of `user` and `user_name`."""
        event = ReactEvent(
            id=id or new_event_id(),
            turn_id=turn_id,
            emoji=emoji,
            remove=remove,
            context=context or self._sender(user, user_name),
        )
        return await self._publish(thread_id, event)

    def _sender(self, user: str | None, user_name: str | None) -> EventContext:
        if not (user or user_name):
            return self._context
        return EventContext(provenance=self.namespace, user=user or "", user_name=user_name or "")

    async def interrupt(self, thread_id: str, *, id: str | None = None) -> Sent:
        """Cancel the turn in flight on the thread and drop its queued messages."""
        event = InterruptEvent(id=id or new_event_id(), context=self._context)
        return await self._publish(thread_id, event)

    async def delete(self, thread_id: str, turn_id: str, *, id: str | None = None) -> Sent:
        """The user deleted the message recorded as `turn_id` (its turn id, or the id it
        was sent with: the platform's message id; bridging): the core keeps
        it as a tombstone the model no longer sees, and linked endpoints delete their
        copies. Pass the platform's id of the deletion as `id` (stored once)."""
        event = DeleteEvent(id=id or new_event_id(), turn_id=turn_id, context=self._context)
        return await self._publish(thread_id, event)


class ConduitClient(MessagesIn):
    """A conduit's connection to ore: threads, messages in, events out.

    Build it with `await ConduitClient.connect(...)`. Wrapping an existing connection
    (`ConduitClient(nc, name=...)`) leaves that connection to the caller, whose
    `error_cb` should pass errors to `permissions.observe`, whose `reconnected_cb`
    should call `resync_feeds()`, and whose `inbox_prefix` should be
    `Subjects().inbox(namespace)` when its user is limited to its namespace (an
    `OreNatsClient`, from `connect_nats`, receives faster than a plain one). API errors
    raise `ApiError`; a bus that cannot be reached raises `BusError`; a subject the
    user may not use, `PermissionDenied`. `secret` keys the message ids (see
    `message_id`); `ore auth` gives every conduit one.
    """

    def __init__(
        self,
        nc: NatsClient,
        *,
        name: str,
        namespace: str | None = None,
        prefix: str = DEFAULT_PREFIX,
        secret: str | bytes | None = None,
        request_timeout: float = 5.0,
        send_deadline: float = 30.0,
        permissions: PermissionWatch | None = None,
        owns_connection: bool = False,
    ) -> None:
        if not name:
            raise ValueError("a conduit needs a name (its namespace defaults to it)")
        self.name = name
        self.namespace = validate_namespace(name if namespace is None else namespace)
        self.subjects = Subjects(prefix)
        self._context = EventContext(provenance=self.namespace)  # frozen: shared by events
        self._keyed = _keyed(secret)
        self._nc = nc
        self._request_timeout = request_timeout
        self._send_deadline = send_deadline
        self.permissions = permissions or PermissionWatch()
        self._publisher = AckedPublisher(nc, self.permissions, request_timeout)
        self._requests = ApiRequests(nc, self.permissions, prefix, request_timeout)
        self._owns_connection = owns_connection
        self._feeds: set[EventFeed] = set()
        self.files = ConduitFiles(nc, self.subjects.files_bucket, self._call)
        # A send's subject is this head + the (checked) thread id, and its header block
        # is the codec's `ingress_block`. The codec is imported here, not with the SDK
        # (tests/project/test_public_surface.py).
        from ore_core._nats import codec

        self._inbound_head = self.subjects.inbound(self.namespace, "_")[:-1]
        self._ingress_block = codec.ingress_block

    @classmethod
    async def connect(
        cls,
        servers: str | list[str],
        *,
        name: str,
        namespace: str | None = None,
        prefix: str = DEFAULT_PREFIX,
        secret: str | bytes | None = None,
        inbox_prefix: str | None = None,
        credentials: NatsCredentials | None = None,
        request_timeout: float = 5.0,
        send_deadline: float = 30.0,
        reconnect_wait: float = 2.0,
        connect_timeout: float = 10.0,
        reconnect: bool = True,
    ) -> ConduitClient:
        """Connect to NATS as conduit `name` (reconnects forever once connected, or
        never with `reconnect=False`: a one-shot command fails at once instead).

        The first connection must succeed within `connect_timeout` seconds, else
        BusError: nats-py would otherwise keep retrying an unreachable server forever.

        `credentials` (user/password, token, nkey, creds file, TLS) default to none.
        `send_deadline`
        bounds how long `send` keeps retrying while NATS or the core is unreachable;
        `reconnect_wait` is the pause between reconnect attempts to one server.
        The connection's inbox prefix is `_INBOX_NS` (NS the namespace, by default
        `name`): replies and acks arrive where only this conduit's user may listen.
        An operator's client (the admin user of `ore auth`) passes `inbox_prefix="_INBOX"`.
        """
        ns = validate_namespace(name if namespace is None else namespace)
        client: ConduitClient | None = None
        permissions = PermissionWatch()

        async def on_error(error: Exception) -> None:
            if permissions.observe(error):
                log.warning("NATS refused a subject", conduit=name, error=str(error))
            elif reconnect:  # else the error is the caller's, raised once
                log.info("NATS connection problem", conduit=name, error=str(error))

        async def on_reconnected() -> None:
            log.info("reconnected to NATS", conduit=name)
            if client is not None:
                client.resync_feeds()

        options: dict[str, Any] = {
            "name": name,
            "error_cb": on_error,
            "reconnected_cb": on_reconnected,
            # nats-py's first connect tries each server until it has failed more than
            # `max_reconnect_attempts` times (-1: forever); one-shot: twice, no pause.
            "allow_reconnect": reconnect,
            "max_reconnect_attempts": -1 if reconnect else 1,
            "reconnect_time_wait": reconnect_wait if reconnect else 0,
            "inbox_prefix": inbox_prefix or Subjects(prefix).inbox(ns),
            **(credentials or NatsCredentials()).connect_options(),
        }
        try:
            async with asyncio.timeout(connect_timeout):
                nc = await connect_nats(
                    [servers] if isinstance(servers, str) else list(servers), **options
                )
        except TimeoutError:
            raise BusError(
                f"conduit {name}: cannot reach NATS at {servers} within {connect_timeout:g}s; "
                "is the server running, and is the URL right?"
            ) from None
        except ImportError as exc:  # nats-py imports nkeys only for nkey and creds auth
            raise BusError(
                f"conduit {name}: nkey and creds-file authentication need the 'nkeys' "
                "package (pip install nkeys)"
            ) from exc
        except (NatsError, OSError) as exc:
            raise BusError(f"cannot connect conduit {name} to NATS at {servers}: {exc}") from exc
        try:
            required = max(feature.since for feature in CONDUIT_FEATURES)
            check_server(nc, required, CONDUIT_FEATURES, who=f"conduit {name}")
        except BusError:
            await nc.close()
            raise
        client = cls(
            nc,
            name=name,
            namespace=ns,
            prefix=prefix,
            secret=secret,
            request_timeout=request_timeout,
            send_deadline=send_deadline,
            permissions=permissions,
            owns_connection=True,
        )
        await client._publisher.start()
        return client

    @property
    def nc(self) -> NatsClient:
        """The NATS connection (for a conduit's own subjects)."""
        return self._nc

    async def close(self) -> None:
        """Close the open event feeds, then drain the connection if this client opened it."""
        for feed in list(self._feeds):
            await feed.close()
        if self._owns_connection and not self._nc.is_closed:
            try:
                await self._nc.drain()
            except NatsError as exc:
                log.debug("drain failed, closing", error=str(exc))
                await self._nc.close()

    async def __aenter__(self) -> ConduitClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # -- control API ----------------------------------------------------------

    async def upload(
        self, source: bytes | Path, name: str | None = None, media_type: str | None = None
    ) -> Attachment:
        """Store a file (stored once by content) and return the reference to send with a
        message (`send(..., attachments=[...])`); see `FileStore.upload`. A file the
        policy refuses raises `FileRefused` before any byte is sent."""
        return await self.files.upload(source, name, media_type)

    async def fetch(self, thread_id: str, attachment: Attachment) -> bytes:
        """The bytes of an attachment of thread `thread_id` (one this conduit reaches),
        checked against its sha256; `FileMissing` or `FileCorrupt` when they cannot be
        had (see `ConduitFiles.fetch`)."""
        return await self.files.fetch(thread_id, attachment)

    async def file_link(self, thread_id: str, attachment: Attachment) -> str | None:
        """A signed, expiring link to an attachment of thread `thread_id` (one this conduit
        reaches), for a platform that cannot be handed the file; None when the deployment
        serves no links (`files.link_base`)."""
        return await self.files.link(thread_id, attachment)

    async def fetch_link(self, token: str) -> tuple[Attachment, bytes]:
        """The file a signed link's token names and its bytes, checked (the route that
        serves links); `ApiError` 403 when the token is forged or expired."""
        return await self.files.fetch_link(token)

    async def lookup_or_create(
        self, key: str, value: str, metadata: Mapping[str, str] | None = None
    ) -> tuple[str, bool]:
        """The thread whose metadata `key` is `value`, created (with `metadata`) if none.

        Atomic across workers: racing conduits get the same thread. Returns
        (thread_id, created). Keys start with the namespace (`slack.thread_ts`): the
        core refuses others, so no conduit can take another's lookups.
        """
        reply = await self._call(
            "threads.lookup", {"key": key, "value": value, "metadata": dict(metadata or {})}
        )
        return str(reply["id"]), bool(reply["created"])

    async def create_thread(
        self, thread_id: str | None = None, metadata: Mapping[str, str] | None = None
    ) -> str:
        """A new thread (with a chosen id, or a generated one); ApiError 409 if it exists."""
        body: dict[str, Any] = {"metadata": dict(metadata or {})}
        if thread_id is not None:
            body["id"] = thread_id
        reply = await self._call("threads.create", body)
        return str(reply["id"])

    async def get_thread(self, thread_id: str) -> ThreadInfo:
        """The thread's tip, metadata and size; ApiError 404 if unknown (or another's)."""
        return ThreadInfo.from_reply(await self._call("threads.get", {"id": thread_id}))

    async def list_threads(self, *, after: str | None = None, limit: int = 100) -> ThreadPage:
        """Thread ids of this namespace in ascending order after `after`, at most `limit`.

        A page may be short (even empty) while `next` is set: keep asking from `next`.
        """
        reply = await self._call("threads.list", {"after": after, "limit": limit})
        return ThreadPage(threads=list(reply["threads"]), next=reply["next"])

    async def read_events(
        self, thread_id: str | None = None, *, after: int = 0, limit: int = 100
    ) -> dict[str, Any]:
        """One page of stored events of the thread (or of the namespace) after `after`.

        `{"events": [{"thread", "sequence", "kind", "event"}, ...], "next": seq or None}`;
        `limit=0` answers `{"last": seq}`, the last stored sequence in scope. Feeds call
        it to catch up; conduits rarely need it directly.
        """
        body: dict[str, Any] = {"after": after, "limit": limit}
        if thread_id is not None:
            body["thread"] = thread_id
        return await self._call("events.read", body)

    async def turns(self, thread_id: str) -> list[Turn]:
        """The thread's active path, oldest first; ApiError 404 if unknown (or another's)."""
        reply = await self._call("threads.turns", {"id": thread_id})
        return [turn_from_dict(turn) for turn in reply["turns"]]

    async def health(self) -> dict[str, Any]:
        """`{"status": "ok", "version": ..., "streams": ...}` from one worker."""
        return await self._call("health", {})

    async def models(self) -> dict[str, Any]:
        """`{"processor": name, "model": configured or None, "models": [...]}`: what
        answers and the models it offers (a thread picks one with `ore.model.name`)."""
        return await self._call("models", {})

    async def fork(self, thread_id: str, turn_id: str) -> str:
        """Make `turn_id` the thread's tip (the next message branches from it)."""
        reply = await self._call("threads.fork", {"id": thread_id, "turn_id": turn_id})
        return str(reply["current_tip"])

    # Bridging (issue 29): delivery reports and the platform id map.

    async def report_delivery(
        self,
        thread_id: str,
        *,
        sequence: int,
        turn: str,
        status: ReportStatus,
        platform_ids: Sequence[str] = (),
        detail: str | None = None,
        origin: str = "",
        reason: FailureReason | None = None,
    ) -> dict[str, Any]:
        """Report what the conduit did with a relayed copy of `turn` (batch `sequence`).

        `delivered` with the platform's message ids records the map both ways, so
        edits, deletes and replies resolve after any restart; `retrying` and `failed`
        store a `delivery` event that the `origin` endpoint (`Relayed.origin`) shows,
        and no other. `sending` (before publishing, with the ids the copy will have)
        claims the copy for a platform whose messages cannot be read back: the reply
        `{"recorded": bool, "status", "platform_ids"}` says whether this claim is the
        first (`recorded`), else what was recorded before (`delivered`: skip it;
        `sending`: a run killed while sending it may have published it). `reason`
        says why a copy is `retrying` or `failed` (`FailureReason`).
        """
        body: dict[str, Any] = {
            "thread": thread_id,
            "sequence": sequence,
            "turn": turn,
            "status": status,
            "platform_ids": list(platform_ids),
        }
        if detail:
            body["detail"] = detail
        if reason:
            body["reason"] = reason
        if origin:
            body["origin"] = origin
        return await self._call("deliveries.report", body)

    async def delivery_lookup(self, platform_id: str) -> tuple[str, str] | None:
        """(thread, turn) of a platform message id this namespace reported, or None."""
        try:
            reply = await self._call("deliveries.lookup", {"platform_id": platform_id})
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise
        return str(reply["thread"]), str(reply["turn"])

    async def delivery_get(self, thread_id: str, turn: str) -> list[str]:
        """The platform message ids this namespace reported delivered for `turn`
        (none, or only claimed as `sending`: [])."""
        try:
            reply = await self._call("deliveries.get", {"thread": thread_id, "turn": turn})
        except ApiError as exc:
            if exc.status == 404:
                return []
            raise
        if reply.get("status") == "sending":
            return []
        return [str(pid) for pid in reply["platform_ids"]]

    async def set_metadata(self, thread_id: str, key: str, value: str) -> dict[str, str]:
        """Set one metadata key (announced as a `properties` event); the new metadata."""
        reply = await self._call("threads.meta.set", {"id": thread_id, "key": key, "value": value})
        return dict(reply["metadata"])

    async def delete_metadata(self, thread_id: str, key: str) -> dict[str, str]:
        """Delete one metadata key (missing is fine); the new metadata."""
        reply = await self._call("threads.meta.delete", {"id": thread_id, "key": key})
        return dict(reply["metadata"])

    async def _call(self, endpoint: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return await self._requests(self.subjects.api(self.namespace, endpoint), body)

    # -- messages in ----------------------------------------------------------

    async def _publish(self, thread_id: str, event: Ingress) -> Sent:
        if tracing.tracer is None:
            return await self._publish_now(thread_id, event)
        return await tracing.publishing(event, thread_id, self._publish_now)

    async def _publish_now(self, thread_id: str, event: Ingress, traceparent: str = "") -> Sent:
        claimed = event.context.provenance
        if claimed and claimed != self.namespace:
            raise ValueError(
                f"provenance {claimed!r} is not this conduit's namespace {self.namespace!r}: "
                "the core refuses a message that claims another identity"
            )
        if not claimed:
            event = event.with_context(
                event.context.model_copy(update={"provenance": self.namespace})
            )
        subject = self._inbound_head + validate_thread_id(thread_id)
        payload = encode_event(event)
        msg_id = _message_id(self._keyed, self.namespace, thread_id, event.id)
        header = self._ingress_block(event.kind, msg_id, traceparent or event.context.traceparent)
        if len(payload) + len(header) > self._nc.max_payload:  # never retried: it never fits
            raise ApiError(
                413,
                "too_large",
                f"{event.kind} {event.id} is {len(payload)} bytes, over the server's "
                f"max_payload of {self._nc.max_payload} bytes",
                subject=subject,
            )
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._send_deadline
        pause = 0.05
        attempt = 0
        while True:
            attempt += 1
            try:
                ack = await self._publisher.publish_encoded(subject, payload, header)
                metrics.received(self.namespace)
                return Sent(event, ack.duplicate, ack.sequence)
            except _RETRYABLE as exc:
                if loop.time() + pause > deadline:
                    raise BusError(
                        f"could not send {event.kind} {event.id} to {subject} in "
                        f"{self._send_deadline}s ({attempt} attempts, last: "
                        f"{type(exc).__name__}): is NATS reachable and `ore serve` running?"
                    ) from exc
                log.info(
                    "send failed, retrying",
                    subject=subject,
                    event_id=event.id,
                    attempt=attempt,
                    error=type(exc).__name__,
                )
            except APIError as exc:
                if exc.err_code in LIMIT_ERROR_CODES:
                    raise BusError(
                        f"ore's ingress stream is full ({exc.description}): {event.kind} "
                        f"{event.id} was not accepted; send it again later (the NATS operator "
                        "must free JetStream space)"
                    ) from exc
                raise BusError(f"JetStream refused {event.kind} {event.id}: {exc}") from exc
            except NatsError as exc:
                raise BusError(f"could not send {event.kind} {event.id}: {exc}") from exc
            await asyncio.sleep(pause)  # back off before the retry
            pause = min(pause * 2, 2.0)

    # -- events out -----------------------------------------------------------

    def events(
        self,
        thread_id: str | None = None,
        *,
        kinds: Collection[str] | None = None,
        durable: str | None = None,
    ) -> EventFeed:
        """The output events of `thread_id` (or of every thread), as `Delivery` objects.

        Enter it (`async with client.events(T) as feed:`) before sending, then iterate.
        Without a thread: every thread of this conduit's namespace. `durable=NAME`
        (letters, digits, `-`) has the core keep the position, so events produced
        while the conduit was stopped arrive after it restarts.
        """
        feed = EventFeed(
            self._nc,
            self.subjects,
            self.namespace,
            self._call,
            thread_id=thread_id,
            kinds=kinds,
            durable=durable,
            permissions=self.permissions,
            on_close=self._feeds.discard,
        )
        self._feeds.add(feed)
        return feed

    def resync_feeds(self) -> None:
        """Make live feeds catch up on what was stored while the connection was down.

        `connect()` calls it on every reconnect; call it from your own
        `reconnected_cb` when you wrapped an existing connection.
        """
        for feed in self._feeds:
            feed.resync()
