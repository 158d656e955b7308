"""A soak: a fixed rate of conversations for minutes, a worker killed every few minutes.

Used by `bench/soak.py` (an hour) and `tests/scale/test_soak.py` (a short one in CI).
One nats-server (the embedded one, `nats.sync` as given), two `ore serve` workers
(tests/scale/harness.py), every thread sending its next numbered message each `period`
seconds: from this process, and (`conduit_threads`) from a conduit process on the SDK
(tests/scale/counter_conduit.py). Every `fault_every` seconds (jittered ±50 %) a kill
-9: of a worker (a new one starts), or, turn about with the workers, of the conduit
(started again at once, it goes on from what was acknowledged). Recorded:

- after each kill: seconds until every message published before it was answered
  (`drain`), and until the ingress consumers had no undelivered message left
  (`pending_zero`: the backlog the kill left was taken up);
- every `sample_every` seconds: RSS and open file descriptors of each worker and of the
  nats-server; the slope per process after `warmup` seconds (least squares);
- at the end: the checker (tests/scale/checker.py) over what `ORE_EVENTS` stored, the
  SQLite store's audit, and the messages JetStream gave up (MAX_DELIVERIES advisories,
  tests/scale/advisories.py).
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nats

from ore_core.bus.server.durability import SyncPolicy
from ore_core.bus.server.embedded import EmbeddedNatsServer
from tests.scale.advisories import GivenUp, MaxDeliveries
from tests.scale.checker import Verdict, check
from tests.scale.counter_conduit import CounterConduit
from tests.scale.faults import FixedRate
from tests.scale.harness import Load, Workers, stored_answers

WORKERS = 2
PARTITIONS = 8


@dataclass
class Recovery:
    """One kill -9 and how the deployment came back from it."""

    at: float
    target: str
    drain: float | None = None
    pending_zero: float | None = None


@dataclass
class Sample:
    at: float
    name: str
    rss_kib: int
    fds: int


@dataclass
class SoakResult:
    minutes: float
    sent: int
    answered: int
    verdict: Verdict
    store_report: Any
    recoveries: list[Recovery] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)
    given_up: list[GivenUp] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return self.verdict.clean and self.store_report.clean and not self.given_up

    def slopes(self, warmup: float) -> dict[str, tuple[float, float, int]]:
        """Per process, over its samples from `warmup` s after its first one on:
        (RSS KiB/min, fds/min, samples)."""
        first: dict[str, float] = {}
        series: dict[str, list[Sample]] = {}
        for sample in self.samples:
            born = first.setdefault(sample.name, sample.at)
            if sample.at >= born + warmup:
                series.setdefault(sample.name, []).append(sample)
        return {
            name: (
                _slope([(s.at / 60, s.rss_kib) for s in points]),
                _slope([(s.at / 60, s.fds) for s in points]),
                len(points),
            )
            for name, points in series.items()
            if len(points) >= 3
        }

    def at_minute(self, name: str, minute: float) -> Sample | None:
        """The sample of process `name` nearest to `minute`."""
        points = [s for s in self.samples if s.name == name]
        return min(points, key=lambda s: abs(s.at - minute * 60), default=None)


def _slope(points: list[tuple[float, float]]) -> float:
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    var = sum((x - mean_x) ** 2 for x, _ in points)
    return sum((x - mean_x) * (y - mean_y) for x, y in points) / var if var else 0.0


def _sample(name: str, pid: int, at: float) -> Sample | None:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None
    rss = next((int(line.split()[1]) for line in status.splitlines() if line[:6] == "VmRSS:"), 0)
    return Sample(at, name, rss, fds)


async def _pending(nc: nats.NATS) -> int:
    """Messages of ORE_IN that no worker has been handed yet, over every partition."""
    infos = await nc.jetstream().streams_info()  # refreshes the connection's view
    del infos
    consumers = await nc.jsm().consumers_info("ORE_IN")
    return sum(info.num_pending for info in consumers)


async def soak_run(
    directory: Path,
    *,
    minutes: float,
    sync: str,
    seed: int,
    threads: int,
    period: float,
    fault_every: float,
    sample_every: float,
    drain: float,
    conduit_threads: int = 0,
    log: Callable[[str], None] = print,
) -> SoakResult:
    """`conduit_threads` more threads are sent by a conduit process (the SDK), and the
    faults alternate: a worker, the conduit, a worker... (without one: workers only)."""
    rng = random.Random(seed)
    server = EmbeddedNatsServer(directory / "nats", config=SyncPolicy(sync).server_config())
    await server.astart()
    workers = Workers(
        [server.url], directory, delay=0.05, partitions=PARTITIONS, ready_timeout=120.0
    )
    nc: nats.NATS | None = None
    given_up = MaxDeliveries()
    conduit = CounterConduit(
        server.url, directory, [f"k{i:04d}" for i in range(conduit_threads)], period
    )
    try:
        for _ in range(WORKERS):
            await workers.start()
        nc = await nats.connect(server.url, max_reconnect_attempts=-1)
        load = Load(nc, threads, prefix="s")
        await load.listen()
        await given_up.listen(nc)
        if conduit.threads:
            conduit.start()
            await conduit.wait_sending()
        rate = FixedRate(load, period)
        start = time.monotonic()
        rate.start()
        targets = ["worker", "conduit"] if conduit.threads else ["worker"]
        recoveries: list[Recovery] = []
        samples: list[Sample] = []
        watchers: list[asyncio.Task[None]] = []
        end = start + minutes * 60
        next_fault = start + fault_every * rng.uniform(0.5, 1.5)
        next_sample = start
        while time.monotonic() < end:
            now = time.monotonic()
            if now >= next_sample:
                samples += _samples(server, workers, now - start)
                next_sample += sample_every
            if now >= next_fault:
                sent = _sent(load, conduit)  # before the kill: what must all be answered
                if targets[len(recoveries) % len(targets)] == "conduit":
                    recovery = Recovery(now - start, f"conduit pid {conduit.pid}")
                    conduit.kill()
                else:
                    recovery = await _kill_a_worker(workers, rng, now - start)
                recoveries.append(recovery)
                log(f"{recovery.at:7.1f}s kill -9 {recovery.target}")
                watchers.append(asyncio.create_task(_watch(nc, load, sent, recovery, start, drain)))
                next_fault += fault_every * rng.uniform(0.5, 1.5)
            await asyncio.sleep(0.25)
        await rate.stop()
        await asyncio.to_thread(conduit.stop)
        sent = _sent(load, conduit)
        await load.wait_answered(drain, sent)
        await asyncio.gather(*watchers)
        answers = await stored_answers(nc)
        verdict, _ = check(sent, answers, load.recorded)
        return SoakResult(
            minutes=minutes,
            sent=sum(sent.values()),
            answered=load.answered(),
            verdict=verdict,
            store_report=await load.audit(workers.store_path),
            recoveries=recoveries,
            samples=samples,
            given_up=given_up.given_up,
        )
    finally:
        if conduit.process is not None and conduit.process.poll() is None:
            conduit.process.kill()
            conduit.process.wait()
        if nc is not None:
            await nc.close()
        workers.stop_all()
        await server.astop()


def _samples(server: EmbeddedNatsServer, workers: Workers, at: float) -> list[Sample]:
    named = [("nats-server", server.pid)]
    named += [(f"worker {w.pid}", w.pid) for w in workers.started if w.alive]
    return [s for name, pid in named if (s := _sample(name, pid, at)) is not None]


async def _kill_a_worker(workers: Workers, rng: random.Random, at: float) -> Recovery:
    victim = rng.choice([w for w in workers.started if w.alive])
    victim.signal(signal.SIGKILL)
    await asyncio.to_thread(victim.process.wait)
    await workers.start(wait=False)
    return Recovery(at, f"worker pid {victim.pid}")


def _sent(load: Load, conduit: CounterConduit) -> dict[str, int]:
    """thread -> its last acknowledged number: the in-process load's and the conduit's."""
    return {**load.sent, **conduit.sent()}


async def _watch(
    nc: nats.NATS,
    load: Load,
    before: dict[str, int],
    recovery: Recovery,
    start: float,
    limit: float,
) -> None:
    """Fill in `recovery`: when the messages sent `before` it were all answered, and when
    the ingress backlog was gone."""
    killed = start + recovery.at
    deadline = killed + limit
    while time.monotonic() < deadline and (recovery.drain is None or recovery.pending_zero is None):
        now = time.monotonic()
        if recovery.drain is None and load.has_answered(before):
            recovery.drain = now - killed
        if recovery.pending_zero is None and now - killed > 0.5:
            try:
                if await _pending(nc) == 0:
                    recovery.pending_zero = time.monotonic() - killed
            except Exception:  # the server is busy: ask again
                pass
        await asyncio.sleep(0.2)
