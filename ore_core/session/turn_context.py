"""TurnContext: everything a turn processor may see and do for one user message.

It is the Python form of the seed's Step: `step()` consumes a stream of artifacts
from a model, emits the lifecycle and artifact events in the documented order,
accumulates deltas into complete artifacts and appends the finished turn. Views
built by `view()` are computed from the persistent thread on every call, so
transforms (system prompts, guardrails) never stack across tool round trips.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, Awaitable, Callable, Sequence

from ore_core.artifacts import Accumulable, Artifact
from ore_core.errors import OreError
from ore_core.events import (
    ArtifactEvent,
    EventContext,
    LifecycleEvent,
    NoticeEvent,
    OutputEvent,
    Severity,
    TurnCompleteEvent,
    UserMessageEvent,
)
from ore_core.ledger.thread import Thread
from ore_core.session.deltas import DeltaAccumulator, DeltaPacer
from ore_core.session.spec import ModelSpec
from ore_core.turn import Role, Turn

__all__ = ["ArtifactHandler", "HandlerFailed", "Transform", "TurnContext", "recorded_events"]

_YIELD_EVERY = 256  # artifacts between two turns of the event loop for other threads

Transform = Callable[[list[Turn], "TurnContext"], list[Turn]]
"""Builds the model's view of the conversation from the persistent turns (per call)."""

ArtifactHandler = Callable[[Artifact, "TurnContext"], Awaitable[None]]
"""Runs after turn_complete for every artifact of the step (e.g. executes tool calls)."""


def recorded_events(turns: Sequence[Turn], context: EventContext) -> list[OutputEvent]:
    """The durable events that announced `turns` (one message's, oldest first), in order.

    As a stream publishes them: a user turn and a turn a processor `append`ed as its
    `turn_complete` alone; an assistant turn (`step`) as each complete artifact, then its
    `turn_complete`. Announcing a recorded message again (its events never left a worker
    that died) produces the batch that worker would have stored.
    """
    events: list[OutputEvent] = []
    for turn in turns:
        if turn.role == Role.ASSISTANT:
            events += [ArtifactEvent.of(artifact, context) for artifact in turn.artifacts]
        events.append(TurnCompleteEvent.of(turn, context))
    return events


class HandlerFailed(OreError):
    """An artifact handler raised; the turn it ran after stays recorded."""


class TurnContext:
    """The processor's handle on one turn. Valid only while the processor runs.

    Concurrency: owned by the stream's worker task; do not share it with other tasks
    that outlive the processor call.
    """

    __slots__ = (
        "_answer_of",
        "_context",
        "_delta_pacing",
        "_publish",
        "_thread",
        "event",
        "spec",
        "transforms",
    )

    def __init__(
        self,
        publish: Callable[[OutputEvent], None],
        thread: Thread,
        event: UserMessageEvent,
        spec: ModelSpec,
        transforms: Sequence[Transform] = (),
        *,
        delta_pacing: tuple[float, int] = (0.0, 4096),
        answer_of: str = "",
    ) -> None:
        self._publish = publish
        # The event id the answer's turns record: a regenerate's, so that one seen again
        # (redelivered) is recognised as answered. "" for a message (its user turn has it).
        self._answer_of = answer_of
        self._delta_pacing = delta_pacing
        self._thread = thread
        self._context: EventContext = event.context
        self.event = event
        self.spec = spec
        self.transforms = tuple(transforms)

    @property
    def thread_id(self) -> str:
        """The conversation this turn belongs to."""
        return self._thread.id

    @property
    def context(self) -> EventContext:
        """Provenance of the user message; stamped on every event this turn emits."""
        return self._context

    def turns(self) -> list[Turn]:
        """The persistent active path, oldest first (a fresh copy on every call)."""
        return self._thread.turns()

    def view(self) -> list[Turn]:
        """The active path after the configured transforms, computed afresh each call."""
        turns = self._thread.turns()
        for transform in self.transforms:
            turns = transform(turns, self)
        return turns

    def metadata(self) -> dict[str, str]:
        """A copy of the thread metadata."""
        return self._thread.meta().all()

    async def emit(self, event: OutputEvent) -> None:
        """Send an event to subscribers and sinks (not stored)."""
        self._publish(event)

    async def notice(self, content: str, severity: Severity = Severity.INFO) -> None:
        """Tell the sender something; notices are never stored or sent to models."""
        self._publish(NoticeEvent(content=content, severity=severity, context=self._context))

    async def append(self, role: Role | str, *artifacts: Artifact) -> Turn:
        """Record a finished turn on the active path and announce it (turn_complete)."""
        turn = self._thread.append(role, *artifacts, event_id=self._answer_of)
        self._publish(TurnCompleteEvent.of(turn, self._context))
        return turn

    async def step(
        self,
        source: AsyncIterable[Artifact],
        *,
        role: Role | str = Role.ASSISTANT,
        handlers: Sequence[ArtifactHandler] = (),
    ) -> Turn:
        """Stream one model response into the conversation and return the recorded turn.

        Emits `lifecycle: submitted`, then `lifecycle: streaming` on the first artifact,
        the deltas (every one as it arrives, or paced: see `ore_core.session.deltas`),
        each complete artifact when it is flushed (deltas
        accumulate per key in first-seen order and flush before any complete artifact
        and at the end), then `turn_complete`. Handlers run afterwards. If `source`
        raises, nothing is recorded and the error propagates.
        """
        publish = self._publish
        context = self._context
        publish(LifecycleEvent.of("submitted", context))
        pending = DeltaAccumulator()
        pacer: DeltaPacer | None = None  # made at the first delta: many steps have none
        result: list[Artifact] = []
        streaming = False
        count = 0
        try:
            async for artifact in source:
                count += 1
                if not count % _YIELD_EVERY:
                    # A producer that never awaits must not starve the other threads.
                    await asyncio.sleep(0)
                if not streaming:
                    streaming = True
                    publish(LifecycleEvent.of("streaming", context))
                if isinstance(artifact, Accumulable):
                    pending.add(artifact)
                    if pacer is None:
                        pacer = self._pacer()
                    pacer.add(artifact)
                    continue
                if pacer is not None:
                    pacer.finish()
                self._flush(pending, result)
                publish(ArtifactEvent.of(artifact, context))
                result.append(artifact)
        finally:
            if pacer is not None:
                pacer.finish()
        self._flush(pending, result)
        turn = await self.append(role, *result)
        for artifact in result:
            for handler in handlers:
                try:
                    await handler(artifact, self)
                except Exception as exc:
                    raise HandlerFailed(f"artifact handler failed: {exc}") from exc
        return turn

    def _pacer(self) -> DeltaPacer:
        interval, max_bytes = self._delta_pacing
        return DeltaPacer(self._publish_artifact, interval=interval, max_bytes=max_bytes)

    def _publish_artifact(self, artifact: Artifact) -> None:
        self._publish(ArtifactEvent.of(artifact, self._context))

    def _flush(self, pending: DeltaAccumulator, result: list[Artifact]) -> None:
        if not pending:
            return
        for artifact in pending.take():
            self._publish_artifact(artifact)
            result.append(artifact)
