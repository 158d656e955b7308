"""PlatformConduit: a conduit that is a platform adapter, run by the SDK's engine.

A platform conduit implements `platform(config, context)`, returning its `Platform`
adapter (its wire, ids and formatting); `run` builds the engine around it:

- inbound: the adapter's events, one lane per conversation (`SerialByKey`), each
  forwarded to the conversation's thread (`Forwarder`) and confirmed to the platform
  (`Inbound.done()`) only after the core acknowledged it;
- outbound: the conduit's durable feed, one lane per thread (`ThreadLanes` of
  `AnswerLane`s): its answers, errors and notices, and the relayed copies of a linked
  thread (`Copies`), every platform call paced (`Pacing`); every part posted is noted
  (`Posted`), so a question about a platform message this process posted (a reaction
  on an answer, a reply to a copy) is answered without the core.

A conduit with more to do than the adapter contract says (the NATS bridge answers
requests on their reply inbox) overrides the hooks: `admit` (bad input refused first),
`forward` (one inbound event to the core), `not_forwarded` (what the sender is told of
a failure), `traceparent` (the sender's trace, continued), `feed_kinds`, `durable`,
`patience` and `copy_patience` (a copy's deadline from the settings). A platform whose
settings change what it can show (a longest message) says so in
`platform_capabilities`; one that keeps its own record of each answer's messages across
a kill, or shows its answers its own way (Slack's native streams), gives each thread its
own `lane`, which still hands copies to `engine.copies`.
"""

from __future__ import annotations

import asyncio
from abc import abstractmethod
from collections.abc import Collection
from dataclasses import dataclass
from functools import partial
from typing import ClassVar

import structlog

from ore_core.conduit.answering import STREAM_INTERVAL, AnswerLane, Outbound
from ore_core.conduit.answers import PartClaims
from ore_core.conduit.base import Conduit, ConduitConfig
from ore_core.conduit.capabilities import Capabilities
from ore_core.conduit.client import ConduitClient, Sent
from ore_core.conduit.conversations import Conversations
from ore_core.conduit.copies import COPY_DEADLINE, Copies
from ore_core.conduit.inbound import Forwarder, SerialByKey, derived_traceparent
from ore_core.conduit.lanes import Lane, ThreadLanes
from ore_core.conduit.pacing import Pacing
from ore_core.conduit.platform import Inbound, Message, Platform
from ore_core.conduit.posted import Posted
from ore_core.errors import ApiError, BusError, OreError
from ore_core.events import UserMessageEvent
from ore_core.tasks import TaskScope

__all__ = ["Engine", "PlatformConduit", "PlatformContext"]

log = structlog.get_logger("ore.conduit.engine")


@dataclass(frozen=True, slots=True)
class PlatformContext:
    """What an adapter may use of its engine: the conduit's name, its connection to the
    core (for an adapter that asks the core itself) and its conversations' threads."""

    name: str
    client: ConduitClient
    conversations: Conversations


class PlatformConduit(Conduit):
    """A `Conduit` whose platform is an adapter (see the module docstring).

    Subclasses set what every conduit sets (`name`, `config_model`, `capabilities`,
    `conversation_key`...) and implement `platform`. `stream_interval` paces edits of
    a streamed answer (`Capabilities.delta_interval` wins when the platform sets it);
    `copy_deadline` is how long a copy is tried before it is reported failed.
    """

    stream_interval: ClassVar[float] = STREAM_INTERVAL
    copy_deadline: ClassVar[float] = COPY_DEADLINE
    connect_first: ClassVar[bool] = False
    """Connect the adapter before the feed opens (which waits for the core): for a
    platform that takes its events into a durable inbox of its own (Slack must be
    acknowledged within seconds), so they are taken while the core is away."""

    @abstractmethod
    def platform(self, config: ConduitConfig, context: PlatformContext) -> Platform:
        """The adapter for these settings (not connected yet: the engine connects it)."""

    async def run(self, client: ConduitClient, config: ConduitConfig) -> None:
        """Run the engine around the adapter until cancelled."""
        await Engine(self, client, config).serve()

    # -- hooks ------------------------------------------------------------------

    def platform_capabilities(self, platform: Platform, config: ConduitConfig) -> Capabilities:
        """What the adapter can do under these settings (a setting may lower its
        `max_message_length`): by default what its class declares."""
        return type(platform).capabilities

    def lane(self, engine: Engine, thread_id: str, outbound: Outbound) -> Lane:
        """The lane of one thread's output: by default the engine's answers and copies
        (`AnswerLane`); a platform that shows its answers its own way gives its own lane,
        which may hand another endpoint's messages to `engine.copies`."""
        return AnswerLane(thread_id, outbound)

    def feed_kinds(self, config: ConduitConfig) -> Collection[str] | None:
        """The output kinds the conduit's feed carries (None: all)."""
        return None

    def durable(self, config: ConduitConfig) -> str:
        """The durable feed's name: the setting `durable` where there is one, else the
        conduit's name (replicas of one deployment share it)."""
        return str(getattr(config, "durable", "") or self.name)

    def patience(self, config: ConduitConfig) -> float | None:
        """Seconds an inbound event waits for the core to come back (None: as long as
        it takes; the platform's event stays unconfirmed meanwhile)."""
        return None

    def copy_patience(self, config: ConduitConfig) -> float:
        """Seconds a relayed copy is tried before it is reported failed (default:
        `copy_deadline`; a conduit with a setting for it reads it here)."""
        return self.copy_deadline

    def traceparent(self, inbound: Inbound) -> str:
        """The sender's traceparent of `inbound`, continued by the conduit's span
        ("" where the platform carries none: a new trace)."""
        return ""

    async def admit(self, engine: Engine, inbound: Inbound) -> bool:
        """Before anything else: False when the conduit dealt with `inbound` itself
        (bad input told to its sender), which is then confirmed and not forwarded."""
        return True

    async def forward(self, engine: Engine, thread_id: str, inbound: Inbound) -> None:
        """Send one inbound event to its thread (the engine confirms it after)."""
        await engine.forward(thread_id, inbound)

    async def not_forwarded(self, engine: Engine, inbound: Inbound, error: OreError) -> None:
        """The core refused `inbound`, or could not be reached within `patience`."""
        log.warning(
            "event not forwarded",
            conduit=self.name,
            conversation=inbound.conversation,
            error=str(error),
        )


class Engine:
    """One run of a platform conduit: its adapter and the parts around it."""

    def __init__(self, conduit: PlatformConduit, client: ConduitClient, config: ConduitConfig):
        self.conduit = conduit
        self.client = client
        self.config = config
        self.name = conduit.name
        self.conversations = Conversations(client, conduit.conversation_key)
        self.platform = conduit.platform(
            config, PlatformContext(conduit.name, client, self.conversations)
        )
        self.capabilities = conduit.platform_capabilities(self.platform, config)
        self.pacing = Pacing(self.name)
        self.posted = Posted(client)
        self.copies = Copies(
            self.name,
            client,
            self.platform,
            self.capabilities,
            self.pacing,
            deadline=conduit.copy_patience(config),
            posted=self.posted,
        )
        self.forwarder = Forwarder(client, self.name, self.posted)
        self.tasks = TaskScope(f"conduit-{self.name}")
        self.per_conversation = SerialByKey(self.tasks, f"{self.name}-in")

    async def serve(self) -> None:
        """Connect the adapter, open the durable feed, then carry events both ways until
        cancelled (or until the adapter's events end with an error, which is raised)."""
        conduit, config = self.conduit, self.config
        interval = self.capabilities.delta_interval or conduit.stream_interval
        outbound = Outbound(
            self.name,
            self.platform,
            self.capabilities,
            self.conversations,
            self.copies,
            self.pacing,
            stream_interval=interval,
            claims=PartClaims(self.client),
            posted=self.posted,
        )
        feed = self.client.events(kinds=conduit.feed_kinds(config), durable=conduit.durable(config))
        try:
            if conduit.connect_first:
                await self.platform.connect()
            async with feed:  # open first: what comes once the platform listens is seen
                if not conduit.connect_first:
                    await self.platform.connect()
                lanes = ThreadLanes(
                    lambda thread: conduit.lane(self, thread, outbound), name=self.name
                )
                async with asyncio.TaskGroup() as group:
                    group.create_task(lanes.run(feed), name=f"{self.name}-out")
                    group.create_task(self._inbound(), name=f"{self.name}-in")
        finally:
            await self.tasks.aclose()
            await self.platform.close()

    async def _inbound(self) -> None:
        async for inbound in self.platform.events():
            self.per_conversation.submit(inbound.conversation, partial(self._receive, inbound))

    async def _receive(self, inbound: Inbound) -> None:
        """Forward one event, then confirm it; a refusal is told and confirmed (it would
        be refused again), a core still away after `patience` is told and not. (The
        client counts a message received once the core has it.)"""
        if not await self.conduit.admit(self, inbound):
            await inbound.done()
            return
        try:
            patience = self.conduit.patience(self.config)
            thread_id = await self.conversations.thread_of(inbound.conversation, patience=patience)
            await self.conduit.forward(self, thread_id, inbound)
        except ApiError as exc:
            await self.conduit.not_forwarded(self, inbound, exc)
            if exc.status >= 500:
                return
        except BusError as exc:
            await self.conduit.not_forwarded(self, inbound, exc)
            return
        await inbound.done()

    async def forward(self, thread_id: str, inbound: Inbound) -> Sent | None:
        """Send `inbound` to the thread in the core's words, with the conduit's span of
        it as its traceparent; what the core acknowledged."""
        return await self.forwarder.forward(thread_id, inbound, traceparent=self._trace(inbound))

    def message(self, inbound: Message) -> UserMessageEvent:
        """The core's event for a user message, as `forward` sends it (for a conduit
        that sends it itself: the NATS bridge opens a request's answer feed first)."""
        return self.forwarder.message(inbound, self._trace(inbound))

    def _trace(self, inbound: Inbound) -> str:
        return derived_traceparent(self.conduit.traceparent(inbound))
