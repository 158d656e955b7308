"""Operations: what an operator and an orchestrator see of a running worker.

Owns the Prometheus metrics (`metrics`), `ore.admin.stats` for `ore top` (`stats`) and
the `/healthz`, `/readyz` and `/metrics` HTTP endpoint (`health`).

May import: everything below `ore_core.bus.service` (every other room, the bridge,
the session, the SDK's counters). Checked by tests/project/test_layers.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ore_core import _lazy_exports

if TYPE_CHECKING:
    from ore_core.bus.ops.health import HealthServer
    from ore_core.bus.ops.metrics import CoreMetrics
    from ore_core.bus.ops.stats import StatsResponder

_EXPORTS: dict[str, str] = {
    "CoreMetrics": "ore_core.bus.ops.metrics",
    "HealthServer": "ore_core.bus.ops.health",
    "StatsResponder": "ore_core.bus.ops.stats",
}
"""Public name -> the module that defines it, imported on first access."""

__all__ = ["CoreMetrics", "HealthServer", "StatsResponder"]

__getattr__, __dir__ = _lazy_exports(__name__, _EXPORTS)
