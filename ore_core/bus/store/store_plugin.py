"""The built-in plugin that offers `store.name = "jetstream"`: the bus's own store.

Threads in NATS JetStream (a journal stream and a KV bucket), shared by every `ore
serve` worker. The store uses the core's NATS connection (bound by `ore serve` at
start), so its only key is `replicas` (`path` is accepted, a shared environment may
set it, and ignored). Registered through the same hook as any plugin (listed in
`ore_core.plugins.manager.BUILTIN_PLUGINS` by name), so the bus needs nothing of the
plugin manager and the plugin manager nothing of the bus.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pydantic import PositiveInt

from ore_core.bus.store.jetstream_store import JetStreamStore
from ore_core.plugins.hookspecs import hookimpl
from ore_core.session.protocols import StoreFactory
from ore_core.store_options import StoreOptions, store_options

__all__ = ["jetstream_store", "ore_register_stores"]


class _JetStreamOptions(StoreOptions):
    path: Path | None = None  # accepted (a shared environment may set it) and ignored
    replicas: PositiveInt = 1


def jetstream_store(section: Mapping[str, Any]) -> JetStreamStore:
    """Threads in NATS JetStream (journal stream + KV), shared by every worker."""
    options = store_options(_JetStreamOptions, "jetstream", section)
    return JetStreamStore(replicas=options.replicas)


@hookimpl
def ore_register_stores(register: Callable[[str, StoreFactory], None]) -> None:
    """Offer `store.name` = `jetstream`."""
    register("jetstream", jetstream_store)
