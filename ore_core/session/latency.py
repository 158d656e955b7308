"""A latency histogram in plain ints, counted where the work is timed and read by the
metrics (`ore_core.bus.ops.metrics`) when Prometheus scrapes.

A bisect and two additions per observation: prometheus-client's histogram takes a lock
and walks its buckets, and these run once per turn or per save.
"""

from __future__ import annotations

from bisect import bisect_left

__all__ = ["LATENCY_BUCKETS", "LatencyHistogram"]

LATENCY_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
"""Seconds: a turn of an echo processor or a save takes a millisecond, a model's a minute."""


class LatencyHistogram:
    """Observations per bucket (`counts[i]`: at most `LATENCY_BUCKETS[i]`, the last one
    above every bound) and their sum."""

    __slots__ = ("counts", "sum")

    def __init__(self) -> None:
        self.counts = [0] * (len(LATENCY_BUCKETS) + 1)
        self.sum = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect_left(LATENCY_BUCKETS, seconds)] += 1
        self.sum += seconds
