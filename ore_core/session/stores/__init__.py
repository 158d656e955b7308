"""The built-in thread stores: memory, JSON files, append-only journals, SQLite.

All implement `ore_core.session.protocols.Store`; `ore_core.testing.store_conformance`
holds the tests every store (built-in or plugin) must pass.
"""

from ore_core.session.stores.journal_store import JournalStore
from ore_core.session.stores.json_store import JSONStore
from ore_core.session.stores.memory import MemoryStore
from ore_core.session.stores.sqlite_store import SQLiteStore

__all__ = ["JSONStore", "JournalStore", "MemoryStore", "SQLiteStore"]
