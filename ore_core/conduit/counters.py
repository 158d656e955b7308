"""The Prometheus counters of a conduit process, served by `ore conduit --health-port`.

One registry per process (a conduit process runs one conduit), so a conduit counts
with one call and no object to pass around: `metrics.delivered("slack")`
(`from ore_core.conduit import metrics`). The SDK
counts what it sees itself (messages sent on to the core); a conduit adds what only
it knows: deliveries to its platform, their failures, its platform's rate limits.
The label is the conduit's name: bounded, never a thread or a user.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol
from weakref import WeakSet

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector

__all__ = ["CONTENT_TYPE", "REGISTRY", "ConduitMetrics", "Outbox", "metrics", "render"]

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


class Outbox(Protocol):
    """A feed of the process, as the outbox gauge reads it (`EventFeed`)."""

    @property
    def namespace(self) -> str: ...

    @property
    def depth(self) -> int: ...


class _Outboxes(Collector):
    """What the process's feeds hold for their conduit, summed per namespace when scraped
    (nothing is counted per event): how far the conduit's platform lags behind the core,
    its own answers and the copies of linked threads alike."""

    def __init__(self) -> None:
        self.feeds: WeakSet[Outbox] = WeakSet()

    def collect(self) -> Iterable[Metric]:
        family = GaugeMetricFamily(
            "ore_conduit_outbox_depth",
            "Events received from the core and not yet finished by the conduit (queued or held).",
            labels=_LABELS,
        )
        depths: dict[str, int] = {}
        for feed in list(self.feeds):
            depths[feed.namespace] = depths.get(feed.namespace, 0) + feed.depth
        for namespace, depth in sorted(depths.items()):
            family.add_metric((namespace,), depth)
        yield family


_OUTBOXES = _Outboxes()
REGISTRY.register(_OUTBOXES)


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

    def watch(self, feed: Outbox) -> None:
        """Count `feed`'s depth in the outbox gauge while it lives (feeds call this)."""
        _OUTBOXES.feeds.add(feed)


metrics = ConduitMetrics()
"""The counters of this conduit process (`from ore_core.conduit import metrics`)."""


def render() -> bytes:
    """The registry in the Prometheus text format."""
    return generate_latest(REGISTRY)
