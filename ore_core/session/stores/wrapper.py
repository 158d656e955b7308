"""StoreWrapper: a store that hands every call to another one.

The base of stores that change one behaviour of a real store and leave the rest to
it: `FencedStore` (saves refused once a worker's lease is overdue) and the test kit's
`FaultyStore` (writes that fail on demand). A subclass overrides what it changes;
store-specific extras of the wrapped store (paths, statistics, a health `check`) stay
reachable as attributes.
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping
from typing import Any

from ore_core.ledger.thread import Thread
from ore_core.session.protocols import Store

__all__ = ["StoreWrapper"]


class StoreWrapper:
    """`inner`, call for call (see the module docstring)."""

    def __init__(self, inner: Store, *, name: str | None = None) -> None:
        self.inner = inner
        self.name = name or inner.name

    async def create(
        self, thread_id: str | None = None, metadata: Mapping[str, str] | None = None
    ) -> Thread:
        """See `Store.create`."""
        return await self.inner.create(thread_id, metadata)

    async def get(self, thread_id: str) -> Thread:
        """See `Store.get`."""
        return await self.inner.get(thread_id)

    async def get_by(self, key: str, value: str) -> Thread:
        """See `Store.get_by`."""
        return await self.inner.get_by(key, value)

    async def get_or_create_by(
        self, key: str, value: str, metadata: Mapping[str, str] | None = None
    ) -> tuple[Thread, bool]:
        """See `Store.get_or_create_by`."""
        return await self.inner.get_or_create_by(key, value, metadata)

    async def save(self, thread: Thread) -> None:
        """See `Store.save`."""
        await self.inner.save(thread)

    async def delete(self, thread_id: str) -> bool:
        """See `Store.delete`."""
        return await self.inner.delete(thread_id)

    async def list(self) -> builtins.list[Thread]:
        """See `Store.list`."""
        return await self.inner.list()

    async def list_ids(self, *, after: str = "", limit: int | None = None) -> builtins.list[str]:
        """See `Store.list_ids`."""
        return await self.inner.list_ids(after=after, limit=limit)

    async def close(self) -> None:
        """Close the wrapped store."""
        await self.inner.close()

    def __getattr__(self, name: str) -> Any:
        # Only called for what the wrapper lacks: the wrapped store's extras.
        if name == "inner":  # not set yet (unpickling, a failed __init__)
            raise AttributeError(name)
        return getattr(self.inner, name)
