"""The control API: the `ore` NATS micro service that manages threads (protocol.md).

Owns `ControlAPI` (`control_api`), what its endpoints share (`api_base`), its part in
bridging (`link_api`: links, gateways, delivery reports), which threads a namespace may
use (`access`), changes applied where they are announced (`changes`), the reads of
stored events and cursors (`stored_reads`), forwarding a request to the worker that
owns its thread (`forwarding`) and the models the worker's processor offers
(`model_offer`).

May import: the vocabulary, the ledger and the session, `ore_core._nats`,
`ore_core.bridge`, and of the bus: `cluster`. Checked by tests/project/test_layers.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ore_core import _lazy_exports

if TYPE_CHECKING:
    from ore_core.bus.api.access import ThreadAccess
    from ore_core.bus.api.api_base import ApiFailure, Reply
    from ore_core.bus.api.changes import ThreadChanges
    from ore_core.bus.api.control_api import ControlAPI
    from ore_core.bus.api.forwarding import Forwarding
    from ore_core.bus.api.link_api import LinkApi
    from ore_core.bus.api.model_offer import ModelOffer
    from ore_core.bus.api.stored_reads import StoredReads

_EXPORTS: dict[str, str] = {
    "ApiFailure": "ore_core.bus.api.api_base",
    "ControlAPI": "ore_core.bus.api.control_api",
    "Forwarding": "ore_core.bus.api.forwarding",
    "LinkApi": "ore_core.bus.api.link_api",
    "ModelOffer": "ore_core.bus.api.model_offer",
    "Reply": "ore_core.bus.api.api_base",
    "StoredReads": "ore_core.bus.api.stored_reads",
    "ThreadAccess": "ore_core.bus.api.access",
    "ThreadChanges": "ore_core.bus.api.changes",
}
"""Public name -> the module that defines it, imported on first access."""

__all__ = [
    "ApiFailure",
    "ControlAPI",
    "Forwarding",
    "LinkApi",
    "ModelOffer",
    "Reply",
    "StoredReads",
    "ThreadAccess",
    "ThreadChanges",
]

__getattr__, __dir__ = _lazy_exports(__name__, _EXPORTS)
