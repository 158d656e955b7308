"""FencedStore: a worker whose partition lease is overdue saves nothing.

Wraps the store of a served `Manager`. A save of a thread whose partition this worker
holds a lease for, but has not renewed in time (it was paused or cut off, and another
worker may own the thread by now), raises `StaleThread` instead of writing; the
stream then drops its copy unsaved. Threads of partitions it never held (the control
API writing any thread) pass through: the store's own compare-and-set on the loaded
version decides those. Everything but `save` is the wrapped store's.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from ore_core.errors import StaleThread
from ore_core.ledger.thread import Thread
from ore_core.session.protocols import Store
from ore_core.session.stores.wrapper import StoreWrapper

__all__ = ["FencedStore"]


class FencedStore(StoreWrapper):
    """`store`, refusing saves for which `may_write(thread_id)` is False."""

    def __init__(self, store: Store, may_write: Callable[[str], bool]) -> None:
        super().__init__(store)
        self._may_write = may_write

    def save(self, thread: Thread) -> Coroutine[Any, Any, None]:
        """Save through the wrapped store, unless this worker's lease is overdue.

        Not a coroutine of its own (one frame less per save): it hands back the wrapped
        store's, or a refusal that raises when awaited, as a coroutine would.
        """
        if not self._may_write(thread.id):
            return _refuse(thread.id)
        return self.inner.save(thread)

    async def close(self) -> None:
        """The wrapped store is its owner's to close."""


async def _refuse(thread_id: str) -> None:
    raise StaleThread(
        f"thread {thread_id}: this worker's lease on its partition is overdue "
        "(paused or cut off from NATS); the copy is dropped and the owner reloads it"
    )
