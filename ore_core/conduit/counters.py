"""The Prometheus counters of a conduit process, served by `ore conduit --health-port`.

One registry per process (a conduit process runs one conduit), so a conduit counts
with one call and no object to pass around: `metrics.delivered("slack")`
(`from ore_core.conduit import metrics`). The SDK
counts what it sees itself (messages sent on to the core); a conduit adds what only
it knows: deliveries to its platform, their failures, its platform's rate limits.
The label is the conduit's name: bounded, never a thread or a user.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.exposition import generate_latest

__all__ = ["CONTENT_TYPE", "REGISTRY", "ConduitMetrics", "metrics", "render"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
"""The Prometheus text exposition format's content type."""

REGISTRY = CollectorRegistry(auto_describe=True)
"""The conduit process's registry (not prometheus-client's global one)."""

_LABELS = ("conduit",)
_RECEIVED = Counter(
    "ore_conduit_messages_received",
    "Platform messages sent on to the core.",
    _LABELS,
    registry=REGISTRY,
)
_DELIVERED = Counter(
    "ore_conduit_messages_delivered",
    "Answers delivered to the platform.",
    _LABELS,
    registry=REGISTRY,
)
_FAILED = Counter(
    "ore_conduit_delivery_failures",
    "Deliveries to the platform that failed for good.",
    _LABELS,
    registry=REGISTRY,
)
_RATE_LIMITED = Counter(
    "ore_conduit_rate_limit_waits",
    "Times the platform said to slow down (HTTP 429 and its kin).",
    _LABELS,
    registry=REGISTRY,
)


class ConduitMetrics:
    """What a conduit counts; `metrics` is the process's one instance."""

    def received(self, conduit: str) -> None:
        """A platform message went on to the core."""
        _RECEIVED.labels(conduit).inc()

    def delivered(self, conduit: str) -> None:
        """An answer reached the platform."""
        _DELIVERED.labels(conduit).inc()

    def delivery_failed(self, conduit: str) -> None:
        """An answer could not be delivered (given up)."""
        _FAILED.labels(conduit).inc()

    def rate_limited(self, conduit: str) -> None:
        """The platform asked this conduit to wait."""
        _RATE_LIMITED.labels(conduit).inc()


metrics = ConduitMetrics()
"""The counters of this conduit process (`from ore_core.conduit import metrics`)."""


def render() -> bytes:
    """The registry in the Prometheus text format."""
    return generate_latest(REGISTRY)
