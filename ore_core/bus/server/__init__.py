"""The NATS server as ore needs it: its layout, checked or created, migrated, documented.

Owns the declaration of every stream, consumer and KV bucket (`layout`), creating and
checking them at start (`streams`, with `BusConfig`), `ore migrate` (`migrate`), the
generated part of docs/operating-nats.md (`operator_doc`), the NATS permissions of the
core, an admin and a conduit (`permissions`), the durability a deployment promises
(`durability`) and the private nats-server of development and tests (`embedded`).

May import: the vocabulary, the config and `ore_core._nats`; nothing else of the bus.
Checked by tests/project/test_layers.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ore_core import _lazy_exports

if TYPE_CHECKING:
    from ore_core.bus.server.durability import SyncPolicy, operator_durability
    from ore_core.bus.server.embedded import EmbeddedNatsServer
    from ore_core.bus.server.layout import Layout, build_layout
    from ore_core.bus.server.migrate import plan_migration
    from ore_core.bus.server.permissions import NatsUser, conduit_permissions
    from ore_core.bus.server.streams import BusConfig, ensure_layout

_EXPORTS: dict[str, str] = {
    "BusConfig": "ore_core.bus.server.streams",
    "EmbeddedNatsServer": "ore_core.bus.server.embedded",
    "Layout": "ore_core.bus.server.layout",
    "NatsUser": "ore_core.bus.server.permissions",
    "SyncPolicy": "ore_core.bus.server.durability",
    "build_layout": "ore_core.bus.server.layout",
    "conduit_permissions": "ore_core.bus.server.permissions",
    "ensure_layout": "ore_core.bus.server.streams",
    "operator_durability": "ore_core.bus.server.durability",
    "plan_migration": "ore_core.bus.server.migrate",
}
"""Public name -> the module that defines it, imported on first access."""

__all__ = [
    "BusConfig",
    "EmbeddedNatsServer",
    "Layout",
    "NatsUser",
    "SyncPolicy",
    "build_layout",
    "conduit_permissions",
    "ensure_layout",
    "operator_durability",
    "plan_migration",
]

__getattr__, __dir__ = _lazy_exports(__name__, _EXPORTS)
