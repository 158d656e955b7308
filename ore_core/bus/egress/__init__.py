"""Egress: every output event of every stream onto NATS, one stored batch per turn.

Owns the egress path: `Egress` (the Manager's sink: live events straight out, durable
ones as one batch per handled event), the `Pipeline` of acked JetStream publishes
(`pipeline`), the copies of a linked thread's batches for its other namespaces
(`copies`), who hears that a JetStream limit holds messages back (`limit_listeners`)
and what the thread's users hear meanwhile (`space_notices`).

May import: the vocabulary, the ledger and the session, `ore_core._nats` and
`ore_core.bridge` (the link cache names the linked namespaces); nothing else of the
bus. Checked by tests/project/test_layers.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ore_core import _lazy_exports

if TYPE_CHECKING:
    from ore_core.bus.egress.copies import StoredCopies
    from ore_core.bus.egress.egress import Egress, EventsNotRead
    from ore_core.bus.egress.limit_listeners import LimitListeners, LimitReached
    from ore_core.bus.egress.pipeline import Pipeline
    from ore_core.bus.egress.space_notices import STORAGE_FULL, SpaceNotices

_EXPORTS: dict[str, str] = {
    "Egress": "ore_core.bus.egress.egress",
    "EventsNotRead": "ore_core.bus.egress.egress",
    "LimitListeners": "ore_core.bus.egress.limit_listeners",
    "LimitReached": "ore_core.bus.egress.limit_listeners",
    "Pipeline": "ore_core.bus.egress.pipeline",
    "STORAGE_FULL": "ore_core.bus.egress.space_notices",
    "SpaceNotices": "ore_core.bus.egress.space_notices",
    "StoredCopies": "ore_core.bus.egress.copies",
}
"""Public name -> the module that defines it, imported on first access."""

__all__ = [
    "Egress",
    "EventsNotRead",
    "LimitListeners",
    "LimitReached",
    "Pipeline",
    "STORAGE_FULL",
    "SpaceNotices",
    "StoredCopies",
]

__getattr__, __dir__ = _lazy_exports(__name__, _EXPORTS)
