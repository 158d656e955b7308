"""Built-in stores `memory`, `json`, `journal` and `sqlite`, built from the `[store]` table.

Each factory validates the keys its store understands (a misspelt or foreign key is
a `ConfigError` naming it, not silently ignored) and defaults `path` to a place under
the user's state directory, so `ore` keeps its threads without any configuration:

| store | `path` default (under `platformdirs.user_state_dir("ore")`) | other keys |
|---|---|---|
| `memory` | none (nothing outlives the process) | none |
| `json` | `threads/` (one `<id>.json` per thread) | none |
| `journal` | `journal/` (one `<id>.jsonl` per thread) | `fsync`, `lock_timeout`, `max_open` |
| `sqlite` | `threads.db` | `fsync`, `busy_timeout` |
| `jetstream` | none (threads live in NATS JetStream) | `replicas` |

`jetstream` is the store for several `ore serve` workers: it uses the core's own NATS
connection (bound by `ore serve` at start), so it needs no address of its own.

`name` (the `store.name` that chose the factory) is accepted and ignored.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import platformdirs
from pydantic import BaseModel, ConfigDict, PositiveFloat, PositiveInt, ValidationError

from ore_core.bus.jetstream_store import JetStreamStore
from ore_core.config import ConfigError
from ore_core.errors import describe_validation_error
from ore_core.ledger.file_repository import FsyncPolicy
from ore_core.plugins.hookspecs import hookimpl
from ore_core.session.protocols import StoreFactory
from ore_core.session.stores import JournalStore, JSONStore, MemoryStore, SQLiteStore

__all__ = [
    "jetstream_store",
    "journal_store",
    "json_store",
    "memory_store",
    "ore_register_stores",
    "sqlite_store",
]

_Options = TypeVar("_Options", bound="_StoreOptions")


class _StoreOptions(BaseModel):
    """The keys every store takes; unknown keys are errors (they are almost always typos)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = ""


class _FileOptions(_StoreOptions):
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


class _JetStreamOptions(_StoreOptions):
    path: Path | None = None  # accepted (a shared environment may set it) and ignored
    replicas: PositiveInt = 1


class _SQLiteOptions(_FileOptions):
    fsync: FsyncPolicy = FsyncPolicy.BATCH
    busy_timeout: PositiveFloat = 10.0
    read_only: bool = False


def _options(model: type[_Options], store: str, section: Mapping[str, Any]) -> _Options:
    """`section` validated by `model`; a `ConfigError` naming each bad `store.*` key."""
    try:
        return model.model_validate(dict(section))
    except ValidationError as exc:
        problems = describe_validation_error(
            exc,
            key_prefix="store.",
            show_input=True,
            origin=lambda _: f"store {store!r}",
            known_keys=[name for name in model.model_fields if name != "name"],
        )
        raise ConfigError(f"invalid [store] configuration: {problems}") from None


def memory_store(section: Mapping[str, Any]) -> MemoryStore:
    """Threads in this process's memory: for tests and throw-away sessions."""
    _options(_StoreOptions, "memory", section)
    return MemoryStore()


def json_store(section: Mapping[str, Any]) -> JSONStore:
    """One JSON file per thread in the directory `path`."""
    options = _options(_FileOptions, "json", section)
    return JSONStore(options.resolved_path("threads"))


def journal_store(section: Mapping[str, Any]) -> JournalStore:
    """One append-only journal per thread in the directory `path`."""
    options = _options(_JournalOptions, "journal", section)
    return JournalStore(
        options.resolved_path("journal"),
        fsync=options.fsync,
        lock_timeout=options.lock_timeout,
        max_open=options.max_open,
    )


def sqlite_store(section: Mapping[str, Any]) -> SQLiteStore:
    """Every thread in the SQLite database file `path` (shareable by several processes)."""
    options = _options(_SQLiteOptions, "sqlite", section)
    return SQLiteStore(
        options.resolved_path("threads.db"),
        fsync=options.fsync,
        busy_timeout=options.busy_timeout,
        read_only=options.read_only,
    )


def jetstream_store(section: Mapping[str, Any]) -> JetStreamStore:
    """Threads in NATS JetStream (journal stream + KV), shared by every worker."""
    options = _options(_JetStreamOptions, "jetstream", section)
    return JetStreamStore(replicas=options.replicas)


@hookimpl
def ore_register_stores(register: Callable[[str, StoreFactory], None]) -> None:
    """Offer `store.name` = `memory`, `json`, `journal`, `sqlite` and `jetstream`."""
    register("memory", memory_store)
    register("json", json_store)
    register("journal", journal_store)
    register("sqlite", sqlite_store)
    register("jetstream", jetstream_store)
