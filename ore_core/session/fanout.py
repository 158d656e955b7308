"""Bounded per-subscriber event buffers: a slow reader never stalls the stream.

`push` never blocks and never awaits. When a buffer holds `maxsize` items, a new
streaming delta is merged into the newest queued delta of the same key (the reader
gets the same text in bigger pieces) or, if it cannot be merged, dropped: the
complete artifact flushed at the end of the step still carries everything. Other
events (turn_complete, lifecycle, error, properties, notices, complete artifacts)
are never dropped; a reader that falls `hard_limit` items behind is cut off with
`SubscriberOverflow` instead of letting memory grow without bound.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import replace
from typing import Generic, TypeVar

from ore_core.artifacts import Artifact, Delta, ReasoningDelta, TextDelta, ToolCallDelta
from ore_core.errors import OreError
from ore_core.events import ArtifactEvent, OutputEvent
from ore_core.tasks import AsyncClosing

__all__ = ["EventBuffer", "Subscription", "SubscriberOverflow", "coalesce_deltas"]

T = TypeVar("T")


class SubscriberOverflow(OreError):
    """A subscriber fell so far behind that it was disconnected."""


def coalesce_deltas(first: Artifact, second: Artifact) -> Artifact | None:
    """Merge two consecutive deltas of one key into one delta, or None if they differ."""
    if type(first) is not type(second):
        return None
    if isinstance(first, TextDelta | ReasoningDelta) and isinstance(
        second, TextDelta | ReasoningDelta
    ):
        return replace(first, content=first.content + second.content)
    if isinstance(first, ToolCallDelta) and isinstance(second, ToolCallDelta):
        if first.index != second.index:
            return None
        return ToolCallDelta(
            index=first.index,
            id=second.id or first.id,
            name=first.name + second.name,
            arguments=first.arguments + second.arguments,
        )
    return None


def _delta_of(event: OutputEvent | None) -> Delta | None:
    if isinstance(event, ArtifactEvent) and isinstance(event.artifact, Delta):
        return event.artifact
    return None


class EventBuffer(Generic[T]):
    """A FIFO of items, each carrying an output event, that coalesces deltas under pressure.

    `event_of` extracts the event from an item (items may be `(thread_id, event)` pairs
    for sinks; None for a mark, see `push_mark`). Single consumer; any number of
    producers on the same event loop.
    """

    def __init__(
        self,
        event_of: Callable[[T], OutputEvent | None],
        rebuild: Callable[[T, OutputEvent], T],
        *,
        maxsize: int = 1024,
        hard_limit: int | None = None,
        lossless: bool = False,
    ) -> None:
        if maxsize < 1:
            raise ValueError("maxsize must be at least 1")
        self._items: deque[T] = deque()
        self._event_of = event_of
        self._rebuild = rebuild
        # A lossless buffer (the bus egress) still merges deltas under pressure but never
        # cuts its reader off: it grows instead, bounded by how long an outage lasts.
        self._hard_limit = (
            None if lossless else hard_limit if hard_limit is not None else maxsize * 8
        )
        # `push` checks one bound: `maxsize` while open, -1 once closed (so the closed
        # case costs the common one no check of its own).
        self._bound = maxsize
        self._waiter: asyncio.Future[None] | None = None
        self._closed = False
        self._error: BaseException | None = None
        self.dropped = 0
        self.coalesced = 0
        # Items taken out (read or discarded): `appended` is counted by the reader's side,
        # once per batch, instead of by every push.
        self._removed = 0

    def __len__(self) -> int:
        return len(self._items)

    @property
    def appended(self) -> int:
        """Items ever queued (a merged delta is no new item): a position readers can await."""
        return self._removed + len(self._items)

    @property
    def closed(self) -> bool:
        """True once `close` was called (items already queued can still be read)."""
        return self._closed

    def push(self, item: T) -> None:
        """Queue `item`; never blocks. Ignored after close."""
        items = self._items
        if len(items) >= self._bound and not self._admit(item):
            return
        items.append(item)
        waiter = self._waiter
        if waiter is not None:  # wake the reader once: later pushes find no waiter
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)

    def _admit(self, item: T) -> bool:
        """For a closed or full buffer: True when `item` is to be queued all the same."""
        if self._closed:
            return False
        items = self._items
        delta = _delta_of(self._event_of(item))
        if delta is not None:
            self._squeeze(item, delta)
            return False
        if self._hard_limit is not None and len(items) >= self._hard_limit:
            self.close(SubscriberOverflow(f"subscriber fell {len(items)} events behind"))
            return False
        return True

    def push_mark(self, item: T) -> None:
        """Queue `item`, a mark between events (no event): never merged or dropped."""
        if self._closed:
            return
        self._items.append(item)
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _squeeze(self, item: T, delta: Delta) -> None:
        last = self._items[-1]
        last_event = self._event_of(last)
        last_delta = _delta_of(last_event)
        merged = coalesce_deltas(last_delta, delta) if last_delta is not None else None
        if merged is None or not isinstance(last_event, ArtifactEvent):
            self.dropped += 1
            return
        self._items[-1] = self._rebuild(last, last_event.model_copy(update={"artifact": merged}))
        self.coalesced += 1

    def close(self, error: BaseException | None = None) -> None:
        """End the buffer: the reader drains what is queued, then stops (or gets `error`)."""
        if self._closed:
            return
        self._closed = True
        self._bound = -1
        if error is not None:
            self._error = error
            self._removed += len(self._items)
            self._items.clear()
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def get(self) -> T:
        """The next item; raises StopAsyncIteration at the end (or the close error)."""
        while not self._items:
            if self._closed:
                if self._error is not None:
                    raise self._error
                raise StopAsyncIteration
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        self._removed += 1
        return self._items.popleft()

    def get_nowait(self) -> T | None:
        """The next queued item, or None when nothing is queued."""
        if not self._items:
            return None
        self._removed += 1
        return self._items.popleft()

    def take_all(self) -> list[T]:
        """Every queued item, in order, leaving none (a batch reader's one call per batch)."""
        items = self._items
        if not items:
            return []
        taken = list(items)
        items.clear()
        self._removed += len(taken)
        return taken


def _identity_event(event: OutputEvent) -> OutputEvent:
    return event


def _replace_event(_old: OutputEvent, new: OutputEvent) -> OutputEvent:
    return new


class Subscription(AsyncClosing):
    """A live, kind-filtered view of one stream's output events (an async iterator).

    Created by `Stream.subscribe(*kinds)`; no kinds means every kind. Ends when the
    stream closes or `close()` is called; use `async with` to unsubscribe reliably.
    """

    def __init__(
        self,
        kinds: Iterable[str],
        on_close: Callable[[Subscription], None],
        *,
        maxsize: int = 1024,
    ) -> None:
        self.kinds: frozenset[str] = frozenset(kinds)
        self._buffer: EventBuffer[OutputEvent] = EventBuffer(
            _identity_event, _replace_event, maxsize=maxsize
        )
        self._on_close = on_close

    def wants(self, kind: str) -> bool:
        """True when this subscription receives events of `kind`."""
        return not self.kinds or kind in self.kinds

    def push(self, event: OutputEvent) -> None:
        """Deliver one event (called by the stream; never blocks)."""
        self._buffer.push(event)

    @property
    def dropped(self) -> int:
        """How many deltas were dropped because this subscriber lagged."""
        return self._buffer.dropped

    def end(self) -> None:
        """End iteration after the queued events (the stream closed)."""
        self._buffer.close()

    def close(self) -> None:
        """Unsubscribe: no more events are delivered; iteration ends after queued ones."""
        self._buffer.close()
        self._on_close(self)

    def __aiter__(self) -> AsyncIterator[OutputEvent]:
        return self

    async def __anext__(self) -> OutputEvent:
        return await self._buffer.get()

    def get_nowait(self) -> OutputEvent | None:
        """The next queued event without waiting, or None."""
        return self._buffer.get_nowait()

    async def aclose(self) -> None:
        """`close`, for `async with` (`AsyncClosing`)."""
        self.close()
