"""The bus's own store: threads in JetStream, the store several workers share.

Owns `JetStreamStore` (`jetstream_store`) and the built-in plugin that offers it as
`store.name = "jetstream"` (`store_plugin`).

May import: the vocabulary, the ledger and the session, `ore_core._nats`, and of the
bus: `cluster` (live keys) and `server` (the journal's stream). Checked by
tests/project/test_layers.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ore_core import _lazy_exports

if TYPE_CHECKING:
    from ore_core.bus.store.jetstream_store import JetStreamStore

_EXPORTS: dict[str, str] = {
    "JetStreamStore": "ore_core.bus.store.jetstream_store",
}
"""Public name -> the module that defines it, imported on first access."""

__all__ = ["JetStreamStore"]

__getattr__, __dir__ = _lazy_exports(__name__, _EXPORTS)
