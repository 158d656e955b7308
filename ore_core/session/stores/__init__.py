"""The built-in thread stores: memory, JSON files, append-only journals, SQLite.

All implement `ore_core.session.protocols.Store`; `ore_core.testing.store_conformance`
holds the tests every store (built-in or plugin) must pass.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ore_core import _lazy_exports

if TYPE_CHECKING:
    from ore_core.session.stores.journal_store import JournalStore
    from ore_core.session.stores.json_store import JSONStore
    from ore_core.session.stores.memory import MemoryStore
    from ore_core.session.stores.sqlite_store import SQLiteStore

_EXPORTS: dict[str, str] = {
    "JournalStore": "ore_core.session.stores.journal_store",
    "JSONStore": "ore_core.session.stores.json_store",
    "MemoryStore": "ore_core.session.stores.memory",
    "SQLiteStore": "ore_core.session.stores.sqlite_store",
}
"""Public name -> the module that defines it, imported on first access."""

__all__ = [
    "JSONStore",
    "JournalStore",
    "MemoryStore",
    "SQLiteStore",
]

__getattr__, __dir__ = _lazy_exports(__name__, _EXPORTS)
