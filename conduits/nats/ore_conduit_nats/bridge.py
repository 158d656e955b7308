"""NatsBridge: plain NATS subjects <-> ore threads, for systems that do not speak ore.

Subjects, for the configured prefix `P` (default `bridge`) and any channel token `C`:

- `P.C.in`: a user message (plain text or `{"text", "user"?, "id"?}`). Published
  with a reply inbox (`nats req`), it gets the finished answer as its reply.
- `P.C.out`: every reply, error and notice of the channel's conversation.
- `P.C.interrupt`: stop the reply being written.

Channel `C` is the thread whose metadata `nats.channel` is `C` (created on first use).
The event id is `nats-C-<id>` with the sender's id (JSON `id`, else `Nats-Msg-Id`), so
a retried message is recorded and answered once; without one it is fresh. Replies
come from a durable feed: what the core wrote while the bridge was down is published
when it is back. Only events of this conduit's own messages are published, and, on a
thread an operator linked to other endpoints (bridging), their messages as `relayed`
replies with the sender's label (and their answers when the gateway answers `all`),
each copy claimed and reported to the core so it is published once across kills.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import structlog
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.errors import Error as NatsError

from ore_conduit_nats.answers import REPLY_KINDS, Answer, Progress
from ore_conduit_nats.config import NatsBridgeConfig
from ore_conduit_nats.tasks import SerialByKey
from ore_conduit_nats.wire import (
    MAX_ID_LENGTH,
    MalformedMessage,
    Reply,
    ReplyKind,
    child_traceparent,
    encode_reply,
    parse_inbound,
)
from ore_core import (
    ArtifactEvent,
    ErrorEvent,
    EventContext,
    LifecycleEvent,
    NoticeEvent,
    OreError,
    OutputEvent,
    PropertiesEvent,
    Role,
    TaskScope,
    Text,
    TurnCompleteEvent,
    UserMessageEvent,
)
from ore_core.artifacts import Attachment
from ore_core.conduit import (
    ApiError,
    BusError,
    Conduit,
    ConduitClient,
    ConduitConfig,
    Delivery,
    EventFeed,
    OwnSubjects,
    PermissionDenied,
    Relayed,
    SettingsCache,
    classify,
    degrade,
    subscriptions_registered,
    until_answered,
)
from ore_core.endpoint import KeyForm
from ore_core.events import MAX_EVENT_ID_LENGTH, DeliveryEvent, new_event_id

__all__ = ["CHANNEL_KEY", "NatsBridge"]

CHANNEL_KEY = "nats.channel"
"""The thread metadata key holding the channel a thread belongs to (for a linked thread,
the core shows the endpoint's channel under this key in `threads.get`)."""

log = structlog.get_logger("ore.conduit.nats")

_CACHED_THREADS = 10_000  # thread -> channel entries kept; the oldest is dropped first

_RELAYED_KINDS = frozenset({"turn_complete", "turn_deleted", "delivery", "properties"})
"""Kinds shown of another endpoint's conversation on a linked thread (its answers by
their `turn_complete`: one copy per answer, claimed like the messages)."""

_Handler = Callable[[Msg, str], Awaitable[None]]  # what to do with a message of a channel
_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class _Request:
    """A request sent to the core and awaiting its answer: what collecting it needs."""

    thread_id: str
    event: UserMessageEvent
    external: str  # the sender's id (or a fresh one): the answer's `in_reply_to`
    duplicate: bool  # JetStream had it already: no event will come, the thread may have it


class NatsBridge(Conduit):
    """The `nats` conduit: see the module docstring and the package README."""

    name = "nats"
    description = "Plain NATS subjects (text or JSON, pub/sub or request-reply) <-> ore threads"
    config_model = NatsBridgeConfig
    conversation_key = CHANNEL_KEY
    key_form = KeyForm("CHANNEL", "room")

    @classmethod
    def own_subjects(cls, config: ConduitConfig) -> OwnSubjects:
        """`P.*.in` and `P.*.interrupt` in, `P.*.out` and the replies to requests out."""
        prefix = config.prefix if isinstance(config, NatsBridgeConfig) else "bridge"
        return OwnSubjects(
            publish=(f"{prefix}.*.out",),
            subscribe=(f"{prefix}.*.in", f"{prefix}.*.interrupt"),
            responses=True,
        )

    async def run(self, client: ConduitClient, config: ConduitConfig) -> None:
        """Bridge until cancelled."""
        if not isinstance(config, NatsBridgeConfig):
            raise TypeError(f"the nats conduit needs a NatsBridgeConfig, got {config!r}")
        await _Bridge(self.name, client, config).serve()


class _Bridge:
    """One run of the bridge: its subscriptions, background tasks and caches."""

    def __init__(self, name: str, client: ConduitClient, config: NatsBridgeConfig) -> None:
        self.name = name
        self.client = client
        self.config = config
        self.tasks = TaskScope(f"conduit-{name}")
        self.per_channel = SerialByKey(self.tasks)
        self.max_channel = MAX_EVENT_ID_LENGTH - MAX_ID_LENGTH - len(name) - 2
        self._answers: dict[str, asyncio.Task[Reply]] = {}  # event id -> its answer
        self._answer_feeds: set[EventFeed] = set()  # closed by their task, or at the end
        self._channel_of: dict[str, str | None] = {}  # thread id -> channel (None: not ours)
        self._in_reply_to: dict[str, str] = {}  # traceparent -> sender's id, until done
        self._settings = SettingsCache()  # linked threads' label and answer settings

    def subject(self, channel: str, kind: str) -> str:
        """`<prefix>.<channel>.<kind>`."""
        return f"{self.config.prefix}.{channel}.{kind}"

    async def serve(self) -> None:
        """Open the durable feed, then listen; publish replies until cancelled."""
        kinds = REPLY_KINDS | _RELAYED_KINDS
        async with self.client.events(kinds=kinds, durable=self.config.durable) as feed:
            subscriptions: list[Subscription] = []
            refused: asyncio.Future[PermissionDenied] = asyncio.get_running_loop().create_future()
            unwatch: list[Callable[[], None]] = []
            try:
                for kind, handler in (("in", self._forward), ("interrupt", self._interrupt)):
                    unwatch.append(
                        self.client.permissions.watch_subscription(
                            self.subject("*", kind), lambda error: _settle(refused, error)
                        )
                    )
                    subscriptions.append(await self._listen(kind, handler))
                await subscriptions_registered(self.client.nc)
                log.info("nats bridge listening", subjects=self.subject("*", "in"))
                await self._render_until_refused(feed, refused)
            finally:
                for stop_watching in unwatch:
                    stop_watching()
                for subscription in subscriptions:
                    await _unsubscribe(subscription)
                await self.tasks.aclose()
                for answer_feed in list(self._answer_feeds):  # of tasks cancelled unstarted
                    await answer_feed.close()

    async def _render_until_refused(
        self, feed: EventFeed, refused: asyncio.Future[PermissionDenied]
    ) -> None:
        """Render replies; a refused subscription ends the run with one line, not idling."""
        render = asyncio.ensure_future(self._render(feed))
        either: set[asyncio.Future[Any]] = {render, refused}
        try:
            await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not render.done():
                render.cancel()
                await asyncio.gather(render, return_exceptions=True)
        if refused.done():
            error = refused.result()
            raise BusError(
                f"conduit {self.name}: NATS refused to let it subscribe to {error.subject!r}, "
                "so it cannot hear any message: grant its subjects "
                f"({self.subject('*', 'in')}, {self.subject('*', 'interrupt')}; "
                f"`ore auth --conduit {self.name}` does) and restart the server"
            ) from error
        render.result()  # its own failure

    async def _listen(self, kind: str, handler: _Handler) -> Subscription:
        async def on_message(msg: Msg) -> None:
            channel = msg.subject[len(self.config.prefix) + 1 : -len(kind) - 1]
            self.per_channel.submit(channel, lambda: self._guarded(msg, channel, handler))

        # The durable name is the deployment's identity: replicas share the input.
        return await self.client.nc.subscribe(
            self.subject("*", kind), queue=self.config.durable, cb=on_message
        )

    async def _guarded(self, msg: Msg, channel: str, handler: _Handler) -> None:
        """Run `handler`; what goes wrong is told to the sender, not raised."""
        try:
            await handler(msg, channel)
        except MalformedMessage as exc:
            await self._tell(msg, channel, Reply("error", str(exc)))
        except (BusError, ApiError) as exc:
            log.warning("message not forwarded", channel=channel, error=str(exc))
            await self._tell(msg, channel, Reply("error", f"message not forwarded: {exc}"))

    # -- in ---------------------------------------------------------------------

    async def _forward(self, msg: Msg, channel: str) -> None:
        inbound = parse_inbound(msg.data, msg.headers, max_bytes=self.config.max_bytes)
        if len(channel) > self.max_channel:
            raise MalformedMessage(f"channel name is over {self.max_channel} characters")
        external = inbound.id or new_event_id()
        event = UserMessageEvent(
            id=f"{self.name}-{channel}-{external}",
            content=inbound.text,
            attachments=inbound.attachments,
            context=EventContext(
                provenance=self.name,
                user=inbound.user,
                user_name=inbound.name,
                traceparent=child_traceparent(msg.headers),
            ),
        )
        thread_id = await self._thread_of(channel)
        log.debug("forwarding", channel=channel, thread_id=thread_id, event_id=event.id)
        if not msg.reply:
            await self.client.send(thread_id, event)
            return
        answer = self._answers.get(event.id)
        if answer is None:  # else: a retry of a request still being answered
            answer = await self._ask(thread_id, event, external)
        self.tasks.spawn(
            self._respond(msg.reply, answer), name=f"respond-{event.id}", critical=False
        )

    async def _ask(
        self, thread_id: str, event: UserMessageEvent, external: str
    ) -> asyncio.Task[Reply]:
        """Send `event` with its answer's feed already open; the task that collects it."""
        feed = await self.client.events(thread_id, kinds=REPLY_KINDS).start()
        self._answer_feeds.add(feed)
        try:
            sent = await self.client.send(thread_id, event)
        except BaseException:
            await feed.close()
            self._answer_feeds.discard(feed)
            raise
        request = _Request(thread_id, event, external, sent.duplicate)
        answer = self.tasks.spawn(
            self._collect(feed, request),
            name=f"answer-{event.id}",
            critical=False,
        )
        self._answers[event.id] = answer
        answer.add_done_callback(lambda done: self._answers.pop(event.id, None))
        return answer

    async def _collect(self, feed: EventFeed, request: _Request) -> Reply:
        try:
            async with feed:
                return await self._read_answer(feed, request)
        finally:
            self._answer_feeds.discard(feed)

    async def _read_answer(self, feed: EventFeed, request: _Request) -> Reply:
        thread_id, event, external = request.thread_id, request.event, request.external
        answer = Answer(event.context.traceparent)
        if request.duplicate and answer.adopt(await self.client.turns(thread_id), event.id):
            # Sent before (by this bridge before a restart, say): JetStream dropped the
            # repeat, so no event will come; the thread has the answer already.
            return answer.reply(thread_id, external)
        timeout = self.config.request_timeout
        try:
            async with asyncio.timeout(timeout):
                async for delivery in feed:
                    progress = answer.add(delivery.event)
                    if progress is Progress.DONE:
                        break
                    if progress is Progress.SKIPPED:  # a retry: answered before
                        answer.adopt(await self.client.turns(thread_id), event.id)
                        break
        except TimeoutError:
            if not answer.adopt(await self.client.turns(thread_id), event.id):
                return Reply(
                    "error",
                    f"no answer within {timeout:g}s (request_timeout); it will be "
                    "published on the channel's .out subject when it is ready",
                    thread_id,
                    external,
                )
        return answer.reply(thread_id, external)

    async def _respond(self, inbox: str, answer: asyncio.Task[Reply]) -> None:
        try:
            reply = await asyncio.shield(answer)  # other retries may wait for it too
        except OreError as exc:
            reply = Reply("error", f"no answer: {exc}")
        await self._publish(inbox, reply)

    async def _thread_of(self, channel: str) -> str:
        """The channel's thread (a linked one's settings are loaded the first time)."""
        thread_id, created = await self._lookup(channel)
        if not created and self._channel_of.get(thread_id) != channel:
            self._settings.load(thread_id, (await self.client.get_thread(thread_id)).metadata)
        self._remember(thread_id, channel)
        return thread_id

    async def _lookup(self, channel: str) -> tuple[str, bool]:
        """`lookup_or_create` of the channel, retried while NATS or the core is away
        (a restart): the bridge holds the message meanwhile instead of refusing it.
        After `request_timeout` the failure is the sender's to hear."""
        deadline = asyncio.get_running_loop().time() + self.config.request_timeout
        return await until_answered(
            lambda: self.client.lookup_or_create(CHANNEL_KEY, channel),
            "channel lookup failed",
            deadline=deadline,
            channel=channel,
        )

    async def _interrupt(self, msg: Msg, channel: str) -> None:
        thread_id = await self._thread_of(channel)
        await self.client.interrupt(thread_id)
        if msg.reply:
            await self._publish(msg.reply, Reply("text", "interrupted", thread_id))

    async def _tell(self, msg: Msg, channel: str, reply: Reply) -> None:
        """Answer a request, else publish on the channel's `.out`."""
        await self._publish(msg.reply or self.subject(channel, "out"), reply)

    # -- out --------------------------------------------------------------------

    async def _render(self, feed: EventFeed) -> None:
        async for delivery in feed:
            event = delivery.event
            if isinstance(event, PropertiesEvent):
                self._settings.update(delivery.thread_id, event)
                continue
            if event.context.provenance != self.name:
                await self._relay(delivery)  # another endpoint's (linked threads only)
                continue
            trace = event.context.traceparent
            if isinstance(event, LifecycleEvent):
                if event.phase == "done":
                    self._in_reply_to.pop(trace, None)
                continue
            channel = await self._channel(delivery.thread_id)
            if channel is None:
                continue
            if isinstance(event, TurnCompleteEvent):
                if event.turn.role == Role.USER:
                    prefix = f"{self.name}-{channel}-"
                    self._in_reply_to[trace] = event.turn.event_id.removeprefix(prefix)
                continue
            reply = _reply_of(event, delivery.thread_id, self._in_reply_to.get(trace))
            if reply is not None:
                await self._publish(self.subject(channel, "out"), reply)

    async def _relay(self, delivery: Delivery) -> None:
        """Show another endpoint's message (labelled), delete, report or answer, and the
        thread's own notices (provenance `app`, e.g. a compaction's one line)."""
        event = delivery.event
        thread_wide = isinstance(event, NoticeEvent) and event.context.provenance == "app"
        if delivery.kind not in _RELAYED_KINDS and not thread_wide:
            return
        channel = await self._channel(delivery.thread_id)
        if channel is None:
            return
        if isinstance(event, NoticeEvent) and thread_wide:  # live-only: it comes once
            notice = Reply(
                "notice", event.content, delivery.thread_id, severity=event.severity.label
            )
            await self._publish(self.subject(channel, "out"), notice)
            return
        relayed = classify(delivery, self.name, self._settings.get(delivery.thread_id))
        reply: Reply | None = None
        if relayed.action in ("relayed", "edited"):
            await self._copy(channel, relayed, delivery)
        elif relayed.action == "answer" and relayed.turn_id:  # a finished answer
            await self._copy(channel, relayed, delivery, kind="text")
        elif relayed.action == "deleted":
            text = f"a message from {relayed.origin} was deleted"
            reply = Reply("notice", text, delivery.thread_id, severity="info")
        elif relayed.action == "delivery":
            late = isinstance(event, DeliveryEvent) and event.status == "delivered"
            severity = "info" if late else "warn"  # delivered after all, else retrying/failed
            reply = Reply("notice", relayed.text, delivery.thread_id, severity=severity)
        if reply is not None:
            await self._publish(self.subject(channel, "out"), reply)

    async def _copy(
        self, channel: str, relayed: Relayed, delivery: Delivery, kind: ReplyKind = "relayed"
    ) -> None:
        """Publish another endpoint's message (or answer) once, across kills of this process.

        A plain subject cannot be read back, so the copy is claimed before it is
        published (`sending`, with the `Nats-Msg-Id` it will carry) and reported
        `delivered` after: a claim found delivered is skipped; one found `sending` (this
        conduit was killed between the publish and the report) is published again with
        the same `Nats-Msg-Id` and `Ore-Resent: true`, for consumers to drop (a
        JetStream stream on the subject drops it by itself).
        """
        thread_id, sequence = delivery.thread_id, delivery.sequence
        _, text = degrade(relayed, NatsBridge.capabilities)
        message_id = f"ore-{thread_id}-{relayed.turn_id}"

        async def report(status: Literal["sending", "delivered"]) -> dict[str, Any]:
            assert sequence is not None
            return await self.client.report_delivery(
                thread_id,
                sequence=sequence,
                turn=relayed.turn_id,
                origin=relayed.origin,
                status=status,
                platform_ids=[message_id],
            )

        resent = False
        if sequence is not None:  # stored: it may come again after a restart
            try:
                claim = await _patiently(lambda: report("sending"), thread_id)
            except ApiError as exc:  # the thread was deleted or unlinked since
                log.info("copy not sent", thread_id=thread_id, error=str(exc))
                return
            if not claim["recorded"] and claim["status"] == "delivered":
                return  # published and reported before a restart
            resent = not claim["recorded"]
        files = _files_of(delivery.event)
        reply = Reply(
            kind, text, thread_id, message_id=message_id, resent=resent, attachments=files
        )
        await self._publish(self.subject(channel, "out"), reply)
        if sequence is not None:
            await _patiently(lambda: report("delivered"), thread_id)

    def _remember(self, thread_id: str, channel: str) -> None:
        if self._channel_of.get(thread_id) == channel:
            return
        if len(self._channel_of) >= _CACHED_THREADS:
            del self._channel_of[next(iter(self._channel_of))]
        self._channel_of[thread_id] = channel

    async def _channel(self, thread_id: str) -> str | None:
        """The channel of a thread, from its metadata; retried while the core is away.

        For a linked thread (another namespace's, or a gateway's), the core shows the
        linked channel under `nats.channel`: it is known before the channel ever spoke.
        """
        if thread_id in self._channel_of:
            return self._channel_of[thread_id]
        try:
            info = await _patiently(lambda: self.client.get_thread(thread_id), thread_id)
            channel = info.metadata.get(CHANNEL_KEY)
            self._settings.load(thread_id, info.metadata)
        except ApiError as exc:
            if exc.status != 404:
                raise
            channel = None  # deleted since: nobody to tell
        if channel is None:
            self._channel_of[thread_id] = None
        else:
            self._remember(thread_id, channel)
        return channel

    async def _publish(self, subject: str, reply: Reply) -> None:
        body, headers = encode_reply(reply, self.config.output)
        try:
            await self.client.nc.publish(subject, body, headers=headers)
        except NatsError as exc:
            raise BusError(f"cannot publish to {subject}: {exc}") from exc


def _files_of(event: OutputEvent) -> tuple[Attachment, ...]:
    """The files of a relayed message (its turn's attachments)."""
    if not isinstance(event, TurnCompleteEvent):
        return ()
    return tuple(a for a in event.turn.artifacts if isinstance(a, Attachment))


def _reply_of(event: OutputEvent, thread_id: str, in_reply_to: str | None) -> Reply | None:
    """What `.out` shows for an event: complete texts, errors and notices."""
    if isinstance(event, ArtifactEvent) and isinstance(event.artifact, Text):
        return Reply("text", event.artifact.content, thread_id, in_reply_to)
    if isinstance(event, ErrorEvent):
        return Reply("error", event.message, thread_id, in_reply_to)
    if isinstance(event, NoticeEvent):
        return Reply("notice", event.content, thread_id, in_reply_to, event.severity.label)
    return None


async def _patiently(call: Callable[[], Awaitable[_T]], thread_id: str) -> _T:
    """`call()`, again while the core is away or failing (a bus error or a 5xx); a
    refusal (another ApiError, PermissionDenied) is raised."""
    return await until_answered(call, "the core did not answer", thread_id=thread_id)


def _settle(future: asyncio.Future[PermissionDenied], error: PermissionDenied) -> None:
    if not future.done():
        future.set_result(error)


async def _unsubscribe(subscription: Subscription) -> None:
    try:
        await subscription.unsubscribe()
    except NatsError as exc:  # the connection closed first: nothing left to undo
        log.debug("unsubscribe failed", error=str(exc))
