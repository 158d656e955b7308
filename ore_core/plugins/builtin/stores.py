"""Built-in stores `memory`, `json`, `journal` and `sqlite`, built from the `[store]` table.

Each factory validates the keys its store understands (`ore_core.store_options`: a
misspelt or foreign key is a `ConfigError` naming it, not silently ignored) and defaults
`path` to a place under the user's state directory, so `ore` keeps its threads without
any configuration:

| store | `path` default (under `platformdirs.user_state_dir("ore")`) | other keys |
|---|---|---|
| `memory` | none (nothing outlives the process) | none |
| `json` | `threads/` (one `<id>.json` per thread) | none |
| `journal` | `journal/` (one `<id>.jsonl` per thread) | `fsync`, `lock_timeout`, `max_open` |
| `sqlite` | `threads.db` | `fsync`, `busy_timeout` |
| `jetstream` | none (threads live in NATS JetStream) | `replicas` |

`jetstream`, the store for several `ore serve` workers, is the bus's: its factory is
registered by the built-in plugin `ore_core.bus.store.store_plugin`.

`name` (the `store.name` that chose the factory) is accepted and ignored.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import platformdirs
from pydantic import PositiveFloat, PositiveInt

from ore_core.ledger.file_repository import FsyncPolicy
from ore_core.plugins.hookspecs import hookimpl
from ore_core.session.protocols import StoreFactory
from ore_core.session.stores.journal_store import JournalStore
from ore_core.session.stores.json_store import JSONStore
from ore_core.session.stores.memory import MemoryStore
from ore_core.session.stores.sqlite_store import SQLiteStore
from ore_core.store_options import StoreOptions, store_options

__all__ = [
    "journal_store",
    "json_store",
    "memory_store",
    "ore_register_stores",
    "sqlite_store",
]


class _FileOptions(StoreOptions):
    path: Path | None = None

    def resolved_path(self, default_name: str) -> Path:
        """`path` with `~` expanded, or `default_name` in the user's state directory."""
        if self.path is not None:
            return self.path.expanduser()
        return Path(platformdirs.user_state_dir("ore")) / default_name


class _JournalOptions(_FileOptions):
    fsync: FsyncPolicy = FsyncPolicy.BATCH
    lock_timeout: PositiveFloat = 2.0
    max_open: PositiveInt | None = None


class _SQLiteOptions(_FileOptions):
    fsync: FsyncPolicy = FsyncPolicy.BATCH
    busy_timeout: PositiveFloat = 10.0
    read_only: bool = False


def memory_store(section: Mapping[str, Any]) -> MemoryStore:
    """Threads in this process's memory: for tests and throw-away sessions."""
    store_options(StoreOptions, "memory", section)
    return MemoryStore()


def json_store(section: Mapping[str, Any]) -> JSONStore:
    """One JSON file per thread in the directory `path`."""
    options = store_options(_FileOptions, "json", section)
    return JSONStore(options.resolved_path("threads"))


def journal_store(section: Mapping[str, Any]) -> JournalStore:
    """One append-only journal per thread in the directory `path`."""
    options = store_options(_JournalOptions, "journal", section)
    return JournalStore(
        options.resolved_path("journal"),
        fsync=options.fsync,
        lock_timeout=options.lock_timeout,
        max_open=options.max_open,
    )


def sqlite_store(section: Mapping[str, Any]) -> SQLiteStore:
    """Every thread in the SQLite database file `path` (shareable by several processes)."""
    options = store_options(_SQLiteOptions, "sqlite", section)
    return SQLiteStore(
        options.resolved_path("threads.db"),
        fsync=options.fsync,
        busy_timeout=options.busy_timeout,
        read_only=options.read_only,
    )


@hookimpl
def ore_register_stores(register: Callable[[str, StoreFactory], None]) -> None:
    """Offer `store.name` = `memory`, `json`, `journal` and `sqlite`."""
    register("memory", memory_store)
    register("json", json_store)
    register("journal", journal_store)
    register("sqlite", sqlite_store)
