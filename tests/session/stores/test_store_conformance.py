"""Every built-in store passes the Store conformance suite."""

from __future__ import annotations

from pathlib import Path

from ore_core import Store
from ore_core.session.stores import JournalStore, JSONStore, MemoryStore, SQLiteStore
from ore_core.testing.store_conformance import StoreConformance


class TestMemoryStore(StoreConformance):
    async def open_store(self, path: Path) -> Store:
        return MemoryStore()

    async def reopen(self, store: Store, path: Path) -> Store:
        return store  # nothing outlives the object: "reopening" keeps it

    async def open_second(self, store: Store, path: Path) -> Store:
        return store  # one process, one dict: a second worker shares the object


class TestJSONStore(StoreConformance):
    async def open_store(self, path: Path) -> Store:
        return JSONStore(path)


class TestJournalStore(StoreConformance):
    exclusive_writer = True

    async def open_store(self, path: Path) -> Store:
        return JournalStore(path, fsync="never", lock_timeout=0.2)


class TestSQLiteStore(StoreConformance):
    async def open_store(self, path: Path) -> Store:
        return SQLiteStore(path / "ore.db")
