"""The async protocols plugins implement: stores, interceptors, sinks, turn processors.

pluggy only registers these objects at start-up; the core awaits their methods
directly on the per-message path (no hook calls there).
"""

from __future__ import annotations

import builtins
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from ore_core.events import IngressEvent, Notice, OutputEvent
    from ore_core.ledger.thread import Thread
    from ore_core.session.stream import Stream
    from ore_core.session.turn_context import TurnContext

__all__ = [
    "InterceptResult",
    "Interceptor",
    "Sink",
    "SinkFunc",
    "Store",
    "StoreFactory",
    "TurnProcessor",
    "TurnProcessorFactory",
]


class Store(Protocol):
    """Where threads live between events. Every method is async and never blocks the loop.

    Contract: ids from outside are validated (`ore_core.ids.validate_thread_id`)
    before they touch a file name or query. Missing thread -> `ThreadNotFound`;
    unreadable thread -> `ThreadCorrupt` from `get`, skipped by `list`.
    `save` persists every change made to the Thread since it was loaded or last
    saved (incrementally where the store can). Threads returned by `get` are
    independent objects: mutating one never changes another caller's copy.
    `save` is compare-and-set: the store remembers the version each copy it handed
    out was loaded at, and saving a copy of a thread that was saved since (by this
    store or another process sharing its data) raises `StaleThread` and writes
    nothing, so several workers can share a store without forking threads.
    """

    name: str

    async def create(
        self, thread_id: str | None = None, metadata: Mapping[str, str] | None = None
    ) -> Thread:
        """A new, persisted, empty thread. A given id that exists raises `ThreadExists`."""

    async def get(self, thread_id: str) -> Thread:
        """The stored thread (all branches, tip and metadata)."""

    async def get_by(self, key: str, value: str) -> Thread:
        """The first thread whose metadata has `key` == `value` (a missing key never matches)."""

    async def get_or_create_by(
        self, key: str, value: str, metadata: Mapping[str, str] | None = None
    ) -> tuple[Thread, bool]:
        """Atomically find the thread with metadata `key` == `value` or create it.

        Returns (thread, created). Two concurrent callers get the same thread.
        """

    async def save(self, thread: Thread) -> None:
        """Persist the thread's changes; StaleThread when the stored thread moved on."""

    async def delete(self, thread_id: str) -> bool:
        """Remove the thread; True when it existed (in any form, cached or not)."""

    async def list(self) -> builtins.list[Thread]:
        """Every readable thread (corrupt ones skipped), ordered by id."""

    async def list_ids(self, *, after: str = "", limit: int | None = None) -> builtins.list[str]:
        """Thread ids in ascending order, strictly after `after`: the paging primitive."""

    async def close(self) -> None:
        """Release files and connections. Idempotent."""


StoreFactory = Callable[[Mapping[str, Any]], Store]
"""Builds a store from its config section (e.g. `{"path": "..."}`)."""


@dataclass(slots=True)
class InterceptResult:
    """What an interceptor decided: pass `event` on (maybe replaced), or None to consume it.

    Notices are shown to the sender and never stored.
    """

    event: IngressEvent | None
    notices: list[Notice] = field(default_factory=list)


@runtime_checkable
class Interceptor(Protocol):
    """Runs before the turn processor for every ingress event of every stream.

    Interceptors run in ascending `order` (then registration order). Returning an
    `InterceptResult` with `event=None` consumes the event: no turn is recorded and the
    processor does not run. Raising is reported to the sender as an error notice.
    """

    name: str
    order: int

    async def intercept(self, event: IngressEvent, stream: Stream) -> InterceptResult:
        """Inspect, replace or consume `event`."""


SinkFunc = Callable[[str, "OutputEvent"], Awaitable[None]]
"""`async fn(thread_id, event)`: receives output events of every stream."""


@runtime_checkable
class Sink(Protocol):
    """Observes output events of all current and future streams (audit, metrics, bridges).

    `kinds` empty means every kind. A failing or slow sink is isolated: it never
    stalls a stream or other sinks.
    """

    name: str
    kinds: frozenset[str]

    async def emit(self, thread_id: str, event: OutputEvent) -> None:
        """Handle one event."""


class TurnProcessor(Protocol):
    """Produces the answer to a user message: `await processor(ctx)`.

    It reads the conversation from `ctx`, streams artifacts through `ctx.step(...)`
    (which emits deltas, lifecycle and the assistant turn) and may append more turns.
    Cancellation (interrupt, close) arrives as `asyncio.CancelledError`.
    """

    async def __call__(self, ctx: TurnContext) -> None:
        """Answer the user message in `ctx.event`."""


TurnProcessorFactory = Callable[..., TurnProcessor]
"""`factory(section)` builds a processor from its `[processor]` config table; a factory
that declares a `tools` parameter is also given the registered tools (name -> Tool)."""
