"""NatsBridge: plain NATS subjects <-> ore threads, for systems that do not speak ore.

Subjects, for the configured prefix `P` (default `bridge`) and any channel token `C`:

- `P.C.in`: a user message (plain text or `{"text", "user"?, "id"?}`). Published
  with a reply inbox (`nats req`), it gets the finished answer as its reply.
- `P.C.out`: every reply, error and notice of the channel's conversation.
- `P.C.interrupt`: stop the reply being written.

Channel `C` is the thread whose metadata `nats.channel` is `C` (created on first use).
The event id is `nats-C-<id>` with the sender's id (JSON `id`, else `Nats-Msg-Id`), so
a retried message is recorded and answered once; without one it is fresh. The bridge
is a platform adapter (`adapter.NatsPlatform`) run by the SDK's engine: replies come
from a durable feed (what the core wrote while the bridge was down is published when it
is back); on a thread an operator linked to other endpoints (bridging), their messages
are published as `relayed` replies with the sender's label (and their answers when the
gateway answers `all`), each copy claimed and reported to the core so it is published
once across kills. What the engine does not know is here: a request's answer goes to
its reply inbox, an interrupt interrupts, bad input is told to its sender.
"""

from __future__ import annotations

from collections.abc import Collection

from ore_conduit_nats.adapter import Interrupt, Malformed, NatsMessage, NatsPlatform
from ore_conduit_nats.answers import REPLY_KINDS
from ore_conduit_nats.config import NatsBridgeConfig
from ore_conduit_nats.wire import Reply
from ore_core import OreError
from ore_core.conduit import (
    ConduitConfig,
    Engine,
    Inbound,
    OwnSubjects,
    PlatformConduit,
    PlatformContext,
)
from ore_core.endpoint import KeyForm

__all__ = ["CHANNEL_KEY", "NatsBridge"]

CHANNEL_KEY = "nats.channel"
"""The thread metadata key holding the channel a thread belongs to (for a linked thread,
the core shows the endpoint's channel under this key in `threads.get`)."""

_RELAYED_KINDS = frozenset({"turn_complete", "turn_deleted", "delivery", "properties"})
"""Kinds shown of another endpoint's conversation on a linked thread (its answers by
their `turn_complete`: one copy per answer, claimed like the messages)."""


class NatsBridge(PlatformConduit):
    """The `nats` conduit: see the module docstring and the package README."""

    name = "nats"
    description = "Plain NATS subjects (text or JSON, pub/sub or request-reply) <-> ore threads"
    config_model = NatsBridgeConfig
    capabilities = NatsPlatform.capabilities
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

    def platform(self, config: ConduitConfig, context: PlatformContext) -> NatsPlatform:
        if not isinstance(config, NatsBridgeConfig):
            raise TypeError(f"the nats conduit needs a NatsBridgeConfig, got {config!r}")
        return NatsPlatform(config, context)

    def feed_kinds(self, config: ConduitConfig) -> Collection[str]:
        return REPLY_KINDS | _RELAYED_KINDS

    def patience(self, config: ConduitConfig) -> float | None:
        """A message waits for the core `request_timeout` at most: then its sender hears."""
        return config.request_timeout if isinstance(config, NatsBridgeConfig) else None

    def traceparent(self, inbound: Inbound) -> str:
        return inbound.traceparent if isinstance(inbound, NatsMessage) else ""

    async def admit(self, engine: Engine, inbound: Inbound) -> bool:
        """A malformed message is refused to its sender, in its channel's order."""
        if isinstance(inbound, Malformed):
            await self._tell(engine, inbound, Reply("error", inbound.error))
            return False
        return True

    async def forward(self, engine: Engine, thread_id: str, inbound: Inbound) -> None:
        """A request's answer goes to its inbox; an interrupt interrupts (and says so)."""
        nats = _adapter(engine)
        if isinstance(inbound, Interrupt):
            await engine.client.interrupt(thread_id)
            if inbound.inbox:
                await nats.publish(inbound.inbox, Reply("text", "interrupted", thread_id))
        elif isinstance(inbound, NatsMessage) and inbound.inbox:
            event = engine.message(inbound)
            await nats.requests.ask(thread_id, event, inbound.external, inbound.inbox)
        else:
            await engine.forward(thread_id, inbound)

    async def not_forwarded(self, engine: Engine, inbound: Inbound, error: OreError) -> None:
        await super().not_forwarded(engine, inbound, error)
        await self._tell(engine, inbound, Reply("error", f"message not forwarded: {error}"))

    async def _tell(self, engine: Engine, inbound: Inbound, reply: Reply) -> None:
        """Answer a request, else publish on the channel's `.out`."""
        nats = _adapter(engine)
        inbox = getattr(inbound, "inbox", "")
        await nats.publish(inbox or nats.subject(inbound.conversation, "out"), reply)


def _adapter(engine: Engine) -> NatsPlatform:
    assert isinstance(engine.platform, NatsPlatform)
    return engine.platform
