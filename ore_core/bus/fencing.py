"""FencedStore: a worker whose partition lease is overdue saves nothing.

Wraps the store of a served `Manager`. A save of a thread whose partition this worker
holds a lease for, but has not renewed in time (it was paused or cut off, and another
worker may own the thread by now), raises `StaleThread` instead of writing; the
stream then drops its copy unsaved. Threads of partitions it never held (the control
API writing any thread) pass through: the store's own compare-and-set on the loaded
version decides those. Everything but `save` is the wrapped store's.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Mapping
from typing import Any

from ore_core.errors import StaleThread
from ore_core.ledger.thread import Thread
from ore_core.session.protocols import Store

__all__ = ["FencedStore"]


class FencedStore:
    """`store`, refusing saves for which `may_write(thread_id)` is False."""

    def __init__(self, store: Store, may_write: Callable[[str], bool]) -> None:
        self.inner = store
        self.name = store.name
        self._may_write = may_write

    async def save(self, thread: Thread) -> None:
        """Save through the wrapped store, unless this worker's lease is overdue."""
        if not self._may_write(thread.id):
            raise StaleThread(
                f"thread {thread.id}: this worker's lease on its partition is overdue "
                "(paused or cut off from NATS); the copy is dropped and the owner reloads it"
            )
        await self.inner.save(thread)

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
        """The wrapped store is its owner's to close."""

    def __getattr__(self, name: str) -> Any:
        # Store-specific extras (paths, statistics) stay reachable.
        return getattr(self.inner, name)
