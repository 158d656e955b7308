"""The cluster: which worker handles which partition, and what stops a stale one.

Owns the partition leases in KV (`ownership`), the store wrapper that saves nothing once
a lease is overdue (`fencing`) and the exact listing of a KV bucket's live keys
(`kv_keys`).

May import: the vocabulary, the session's store protocol (fencing wraps a `Store`),
`ore_core._nats`, and of the bus: `server` (the bus settings). Checked by
tests/project/test_layers.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ore_core import _lazy_exports

if TYPE_CHECKING:
    from ore_core.bus.cluster.fencing import FencedStore
    from ore_core.bus.cluster.kv_keys import live_keys
    from ore_core.bus.cluster.ownership import Ownership

_EXPORTS: dict[str, str] = {
    "FencedStore": "ore_core.bus.cluster.fencing",
    "Ownership": "ore_core.bus.cluster.ownership",
    "live_keys": "ore_core.bus.cluster.kv_keys",
}
"""Public name -> the module that defines it, imported on first access."""

__all__ = ["FencedStore", "Ownership", "live_keys"]

__getattr__, __dir__ = _lazy_exports(__name__, _EXPORTS)
