"""`ore.admin.stats`: every worker answers with a snapshot of its metrics (`ore top`).

A scatter-gather request: no queue group, so each worker of a deployment replies and
the asker collects the replies for a short window. The snapshot is made from the
worker's own metrics registry when asked (nothing is kept for it between requests).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import structlog
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from ore_core import jsonutil
from ore_core.bus.ops.metrics import CoreMetrics
from ore_core.subjects import Subjects

__all__ = ["STATS_ENDPOINT", "StatsResponder", "snapshot"]

STATS_ENDPOINT = "stats"
"""The admin endpoint's name: `ore.admin.stats`."""

log = structlog.get_logger("ore.bus")


def snapshot(
    metrics: CoreMetrics, worker_id: str, partitions: list[int], started: float
) -> dict[str, Any]:
    """The worker's numbers as JSON-ready data (counts, gauges, latency buckets)."""
    values: dict[str, float] = {}
    buckets: list[tuple[float, float]] = []
    for family in metrics.registry.collect():
        for sample in family.samples:
            if sample.name == "ore_turn_duration_seconds_bucket":
                buckets.append((float(sample.labels["le"]), sample.value))
            elif not sample.labels or set(sample.labels) == {"processor"}:
                values[sample.name] = sample.value
            elif sample.name == "ore_messages_dead_lettered_total":
                values["ore_messages_dead_lettered_total"] = (
                    values.get("ore_messages_dead_lettered_total", 0.0) + sample.value
                )
    return {
        "worker": worker_id,
        "partitions": partitions,
        "uptime": time.monotonic() - started,
        "in_flight": values.get("ore_messages_in_flight", 0.0),
        "started": values.get("ore_turns_started_total", 0.0),
        "completed": values.get("ore_turns_completed_total", 0.0),
        "failed": values.get("ore_turns_failed_total", 0.0),
        "dead_lettered": values.get("ore_messages_dead_lettered_total", 0.0),
        "latency_buckets": [[le if le != float("inf") else None, n] for le, n in buckets],
    }


class StatsResponder:
    """Answers `ore.admin.stats` with this worker's `snapshot`."""

    def __init__(
        self,
        nc: NatsClient,
        subjects: Subjects,
        metrics: CoreMetrics,
        worker_id: str,
        partitions: Callable[[], list[int]],
    ) -> None:
        self._nc = nc
        self._subject = subjects.admin(STATS_ENDPOINT)
        self._metrics = metrics
        self._worker_id = worker_id
        self._partitions = partitions
        self._started = time.monotonic()
        self._sub: Subscription | None = None

    async def start(self) -> None:
        """Subscribe (every worker, no queue group)."""
        self._sub = await self._nc.subscribe(self._subject, cb=self._answer)

    async def stop(self) -> None:
        """Unsubscribe. Idempotent."""
        sub, self._sub = self._sub, None
        if sub is not None:
            await sub.unsubscribe()

    async def _answer(self, msg: Msg) -> None:
        if not msg.reply:
            return
        data = snapshot(self._metrics, self._worker_id, self._partitions(), self._started)
        await msg.respond(jsonutil.dumps(data))
