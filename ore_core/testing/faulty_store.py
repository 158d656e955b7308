"""FaultyStore: a real store whose writes can be made to fail, for store-failure tests.

It wraps any store and, while `failing` is set, makes every write (create, save,
delete) raise the StoreError a full or read-only disk would, without touching the
wrapped store; reads go through. Nothing is mocked: the wrapped store is real, only
the fault is injected, and `failures` counts how often it was hit.
"""

from __future__ import annotations

from collections.abc import Mapping

from ore_core.errors import StoreError
from ore_core.ledger.thread import Thread
from ore_core.session.protocols import Store
from ore_core.session.stores.wrapper import StoreWrapper

__all__ = ["FaultyStore"]


class FaultyStore(StoreWrapper):
    """`inner` with switchable write failures (see the module docstring)."""

    def __init__(self, inner: Store, *, message: str = "No space left on device") -> None:
        super().__init__(inner, name=f"faulty-{inner.name}")
        self.failing = False
        self.failures = 0
        self._message = message

    def _check(self) -> None:
        if self.failing:
            self.failures += 1
            raise StoreError(f"{self.name}: [Errno 28] {self._message} (injected fault)")

    async def create(
        self, thread_id: str | None = None, metadata: Mapping[str, str] | None = None
    ) -> Thread:
        """Create in the inner store unless failing."""
        self._check()
        return await self.inner.create(thread_id, metadata)

    async def get_or_create_by(
        self, key: str, value: str, metadata: Mapping[str, str] | None = None
    ) -> tuple[Thread, bool]:
        """Look up or create in the inner store unless failing."""
        self._check()
        return await self.inner.get_or_create_by(key, value, metadata)

    async def save(self, thread: Thread) -> None:
        """Save in the inner store unless failing."""
        self._check()
        await self.inner.save(thread)

    async def delete(self, thread_id: str) -> bool:
        """Delete in the inner store unless failing."""
        self._check()
        return await self.inner.delete(thread_id)

    async def check(self) -> None:
        """The health probe: fails while writes fail."""
        self._check()
