"""The Prometheus metrics of `ore serve`, served as `/metrics` on its health port.

Cost first: nothing here runs per message or per delta on the hot path. Turns are
counted and timed by a batch sink that takes only the `lifecycle` and `error` events
(a few per turn, delivered off the stream's task, a batch per wake-up); everything the
core already counts (messages in flight, partitions held, events refused, publishes
lost, rejections by reason) is read when Prometheus scrapes, by a custom collector.
Takeovers and lease losses are counted where the service hears of them (rare).

Timing is taken when the sink sees an event, so a latency is late by at most one sink
wake-up on each end; good enough for percentiles in milliseconds, not for microseconds.
Labels are bounded: the processor's name, a rejection's reason; never a thread id.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from itertools import accumulate

from prometheus_client import CollectorRegistry
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector

from ore_core.events import OutputEvent
from ore_core.session.latency import LATENCY_BUCKETS, LatencyHistogram

__all__ = ["CONTENT_TYPE", "CoreMetrics", "Readings", "TURN_KINDS"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
"""The Prometheus text exposition format's content type."""

TURN_KINDS = frozenset({"lifecycle", "error"})
"""The event kinds the metrics sink takes (never the deltas)."""


@dataclass(frozen=True)
class Readings:
    """Where the scrape-time collector reads what the core already counts."""

    in_flight: Callable[[], int]
    partitions_owned: Callable[[], int]
    events_refused: Callable[[], int]
    deltas_dropped: Callable[[], int]
    publishes_lost: Callable[[], int]
    dead_lettered: Callable[[], Mapping[str, int]]
    parked: Callable[[], Mapping[str, int]]
    store_failures: Callable[[], int]
    store_saves: LatencyHistogram
    redelivered: Callable[[], int]
    egress_batches: Callable[[], int]
    egress_retries: Callable[[], int]


class _Started:
    """A turn in progress in one thread, as the sink saw it."""

    __slots__ = ("at", "failed", "streaming")

    def __init__(self, at: float) -> None:
        self.at = at
        self.streaming = False
        self.failed = False


def _histogram(
    histogram: LatencyHistogram, name: str, documentation: str, processor: str | None = None
) -> Metric:
    """`histogram` as a metric (labelled with the processor's name when given)."""
    labels = () if processor is None else (processor,)
    family = HistogramMetricFamily(name, documentation, labels=("processor",)[: len(labels)])
    cumulative = list(accumulate(histogram.counts))
    bounds = [str(float(b)) for b in LATENCY_BUCKETS] + ["+Inf"]
    family.add_metric(labels, list(zip(bounds, cumulative, strict=True)), histogram.sum)
    return family


class CoreMetrics:
    """One worker's metrics: its own registry (never the process-global one).

    The turn counters are plain ints bumped by the sink and turned into metrics when
    scraped, like everything else here: the cost per turn is a few additions.
    """

    def __init__(self, processor: str) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.processor = processor
        self.turns_started = 0
        self.turns_completed = 0
        self.turns_failed = 0
        self.takeovers = 0
        self.leases_lost = 0
        self.turn_seconds = LatencyHistogram()
        self.first_token_seconds = LatencyHistogram()
        self._running: dict[str, _Started] = {}
        self._clock = time.monotonic
        self.registry.register(_TurnsCollector(self))

    def read(self, readings: Readings) -> None:
        """Read what the core counts at every scrape (once the service has started)."""
        self.registry.register(_ReadingsCollector(readings))

    def render(self) -> bytes:
        """The registry in the Prometheus text format."""
        return generate_latest(self.registry)

    async def observe(self, items: list[tuple[str, OutputEvent | None]]) -> None:
        """The batch sink: counts and times turns from their lifecycle and error events."""
        now = self._clock()
        running = self._running
        for thread_id, event in items:
            if event is None:  # a turn given up; handled again later, from its start
                running.pop(thread_id, None)
            elif event.kind == "error":
                turn = running.get(thread_id)
                if turn is not None:
                    turn.failed = True
            elif (phase := getattr(event, "phase", None)) == "submitted":
                running[thread_id] = _Started(now)
                self.turns_started += 1
            elif phase == "streaming":
                turn = running.get(thread_id)
                if turn is not None and not turn.streaming:
                    turn.streaming = True
                    self.first_token_seconds.observe(now - turn.at)
            elif phase in ("done", "cancelled"):
                turn = running.pop(thread_id, None)
                if turn is not None:
                    self.turn_seconds.observe(now - turn.at)
                    if turn.failed:
                        self.turns_failed += 1
                    else:
                        self.turns_completed += 1


class _TurnsCollector(Collector):
    """The sink's counts and histograms, and the lease events, as metrics."""

    def __init__(self, metrics: CoreMetrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterable[Metric]:
        m = self._metrics
        for name, documentation, value in (
            ("ore_turns_started", "Turns whose processor was called.", m.turns_started),
            ("ore_turns_completed", "Turns that ended without an error.", m.turns_completed),
            ("ore_turns_failed", "Turns that ended with an error event.", m.turns_failed),
        ):
            family = CounterMetricFamily(name, documentation, labels=("processor",))
            family.add_metric([m.processor], value)
            yield family
        yield _histogram(
            m.turn_seconds,
            "ore_turn_duration_seconds",
            "From the processor's call to the turn's done.",
            m.processor,
        )
        yield _histogram(
            m.first_token_seconds,
            "ore_turn_first_token_seconds",
            "From the processor's call (the model call) to its first output.",
            m.processor,
        )
        yield CounterMetricFamily(
            "ore_partition_takeovers",
            "Partition leases this worker acquired (not those it claimed back after they "
            "lapsed here, e.g. in a NATS outage).",
            m.takeovers,
        )
        yield CounterMetricFamily(
            "ore_partition_leases_lost",
            "Partition leases lost (not renewed in time, taken by another worker).",
            m.leases_lost,
        )


class _ReadingsCollector(Collector):
    """Turns the core's own counters into metrics when scraped."""

    def __init__(self, readings: Readings) -> None:
        self._readings = readings

    def collect(self) -> Iterable[Metric]:
        r = self._readings
        for family, name, documentation, read in (
            (
                GaugeMetricFamily,
                "ore_messages_in_flight",
                "Ingress messages handed to streams and not yet acknowledged.",
                r.in_flight,
            ),
            (
                GaugeMetricFamily,
                "ore_partitions_owned",
                "Ingress partitions this worker holds.",
                r.partitions_owned,
            ),
            (
                CounterMetricFamily,
                "ore_egress_events_refused",
                "Output events not published: an overdue lease or a thread that moved.",
                r.events_refused,
            ),
            (
                CounterMetricFamily,
                "ore_egress_deltas_dropped",
                "Text deltas dropped when publishing fell behind (stored events are kept).",
                r.deltas_dropped,
            ),
            (
                CounterMetricFamily,
                "ore_publishes_lost",
                "Publishes given up after retries (JetStream refused or unreachable).",
                r.publishes_lost,
            ),
            (
                CounterMetricFamily,
                "ore_store_save_failures",
                "Saves of a thread that failed.",
                r.store_failures,
            ),
            (
                CounterMetricFamily,
                "ore_messages_redelivered",
                "Ingress messages JetStream delivered again (a nak, a crash, a hand-over).",
                r.redelivered,
            ),
            (
                CounterMetricFamily,
                "ore_egress_batches",
                "Stored batches of output events published (one per handled message, or more).",
                r.egress_batches,
            ),
            (
                CounterMetricFamily,
                "ore_egress_retries",
                "Publishes of stored events sent again (no ack in time, or no stream answered).",
                r.egress_retries,
            ),
        ):
            yield family(name, documentation, value=read())
        for name, documentation, counts in (
            (
                "ore_messages_dead_lettered",
                "Ingress messages rejected to the dead-letter stream, by reason.",
                r.dead_lettered(),
            ),
            (
                "ore_messages_parked",
                "Ingress messages held for a retry, by why: store, stale (another writer), other.",
                r.parked(),
            ),
        ):
            by_reason = CounterMetricFamily(name, documentation, labels=("reason",))
            for reason, count in sorted(counts.items()):
                by_reason.add_metric((reason,), count)
            yield by_reason
        yield _histogram(
            r.store_saves,
            "ore_store_save_duration_seconds",
            "How long the saves of a thread that worked took.",
        )


def reference_table() -> str:
    """The Markdown table of every metric of a worker and a conduit (docs/operating.md)."""
    from ore_core.conduit.counters import REGISTRY as CONDUIT_REGISTRY

    metrics = CoreMetrics("processor")
    metrics.read(
        Readings(
            in_flight=lambda: 0,
            partitions_owned=lambda: 0,
            events_refused=lambda: 0,
            deltas_dropped=lambda: 0,
            publishes_lost=lambda: 0,
            dead_lettered=lambda: {"reason": 0},
            parked=lambda: {"reason": 0},
            store_failures=lambda: 0,
            store_saves=LatencyHistogram(),
            redelivered=lambda: 0,
            egress_batches=lambda: 0,
            egress_retries=lambda: 0,
        )
    )
    rows = ["| metric | type | labels | what it counts |", "| --- | --- | --- | --- |"]
    for process, registry in (("ore serve", metrics.registry), ("conduit", CONDUIT_REGISTRY)):
        for family in registry.collect():
            name = family.name + ("_total" if family.type == "counter" else "")
            labels = sorted({key for s in family.samples for key in s.labels} - {"le"})
            if not family.samples:
                labels = ["conduit"]  # a labelled metric shows no sample before its first use
            rows.append(
                f"| `{name}` | {family.type} | {', '.join(labels) or '-'} | "
                f"{family.documentation} ({process}) |"
            )
    return "\n".join(rows) + "\n"
