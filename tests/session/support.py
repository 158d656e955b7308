"""Small helpers shared by the session tests (real Manager, real MemoryStore)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from ore_core import EventContext, LifecycleEvent, OutputEvent, UserMessageEvent
from ore_core.session.fanout import Subscription


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
