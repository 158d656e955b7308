"""Small helpers shared by the session tests (real Manager, real MemoryStore)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from ore_core import (
    Artifact,
    EventContext,
    LifecycleEvent,
    Manager,
    OutputEvent,
    Role,
    UserMessageEvent,
)
from ore_core.session.fanout import Subscription
from ore_core.session.policy import DoubleTexting
from ore_core.session.stores.memory import MemoryStore
from ore_core.testing.processors import GatedProcessor


def message(text: str, provenance: str = "test", **kwargs: Any) -> UserMessageEvent:
    """A user message from the `test` conduit."""
    return UserMessageEvent(content=text, context=EventContext(provenance=provenance), **kwargs)


def is_done(event: OutputEvent) -> bool:
    """True for `lifecycle: done`."""
    return isinstance(event, LifecycleEvent) and event.phase == "done"


async def collect(
    subscription: Subscription,
    *,
    count: int = 1,
    until: Callable[[OutputEvent], bool] = is_done,
    within: float = 30.0,
) -> list[OutputEvent]:
    """Read events until `until` has matched `count` times (fails after `within` s)."""
    events: list[OutputEvent] = []
    matched = 0

    async def read() -> None:
        nonlocal matched
        async for event in subscription:
            events.append(event)
            if until(event):
                matched += 1
                if matched == count:
                    return

    await asyncio.wait_for(read(), within)
    return events


def kinds(events: list[OutputEvent]) -> list[str]:
    """The kinds, with lifecycle phases spelled out (`lifecycle:done`)."""
    return [f"lifecycle:{e.phase}" if isinstance(e, LifecycleEvent) else e.kind for e in events]


ECHO_TURN = [
    "turn_complete",
    "lifecycle:submitted",
    "lifecycle:streaming",
    "text_delta",
    "text",
    "turn_complete",
    "lifecycle:done",
]
"""What an echo turn emits, in order (its user turn first)."""


async def collected(first: UserMessageEvent, *later: UserMessageEvent) -> tuple[Artifact, ...]:
    """The artifacts of the user turn that collects `later`, sent while `first` is being
    answered (double texting `collect`), on a real Manager."""
    gate = GatedProcessor()
    async with Manager(MemoryStore(), gate, policy=DoubleTexting.COLLECT) as manager:
        stream = await manager.create()
        answering = asyncio.create_task(stream.process(first))
        await asyncio.wait_for(gate.started.wait(), 30)
        waiting = [asyncio.create_task(stream.process(event)) for event in later]
        await asyncio.sleep(0)
        gate.release()
        await asyncio.wait_for(asyncio.gather(answering, *waiting), 30)
    return [t.artifacts for t in stream.turns() if t.role == Role.USER][-1]
