"""A fault run on a 3-node JetStream cluster: the nemesis, the fixed-rate load, the heal.

Used by `bench/chaos.py` (the long run) and `tests/scale/test_faults.py` (one fault of
each kind, in CI). Three `ore serve` workers (tests/scale/harness.py, streams R3) on a
loopback cluster of three nats-servers (`ore_core.testing.cluster`); every thread sends
its next numbered message at a fixed rate whatever happens (a publish is retried with
the same `Nats-Msg-Id` until JetStream acknowledges it). Faults, one at a time:

  kill-node       kill -9 of one node; restarted after `hold` seconds
  kill-majority   kill -9 of two nodes at once; both restarted after `hold`
  kill-all-nodes  kill -9 of all three under load (a process crash of the whole
                  cluster; the page cache survives it, so it is not a power loss)
  pause-node      SIGSTOP of one node for `hold` seconds, then SIGCONT
  pause-worker    SIGSTOP of one worker for longer than its lease, then SIGCONT
  kill-worker     kill -9 of one worker (a third of three), a new one started at once

A worker that stops by itself (a crash) fails the run: every fault must end without an
operator's step. Then the heal (everything resumed, restarted, three workers serving),
the drain (until every sent message is answered, or `drain` seconds), and the checker
(tests/scale/checker.py) on what `ORE_EVENTS` stored, plus whether every node holds the
same `ORE_IN` and `ORE_EVENTS` (messages, first and last sequence) after the heal.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nats
from nats.aio.client import Client

from ore_core.bus.server.durability import SyncPolicy
from ore_core.bus.server.embedded import EmbeddedNatsServer
from ore_core.testing.cluster import EmbeddedNatsCluster
from tests.scale.advisories import GivenUp, MaxDeliveries
from tests.scale.checker import Verdict, check
from tests.scale.harness import Load, Workers, inbound_sequences, stored_answers

NODE_FAULTS = ("kill-node", "kill-majority", "pause-node", "pause-worker")
EVERY_KIND = (*NODE_FAULTS, "kill-worker", "kill-all-nodes")
WORKERS = 3
PARTITIONS = 8
LEASE_TTL = 4.0
_NODE_READY = 60.0


@dataclass
class FaultRecord:
    """One fault: what, on which, when it began (s after the start), how long it lasted."""

    kind: str
    target: str
    at: float
    took: float


@dataclass
class RunResult:
    """What a fault run found."""

    sync: str
    sent: int
    answered: int
    verdict: Verdict
    bad_threads: dict[str, Verdict]
    store_report: Any
    nodes_agree: bool
    node_states: dict[str, dict[str, Any]]
    faults: list[FaultRecord] = field(default_factory=list)
    drain_seconds: float = 0.0
    stopped_by_themselves: list[str] = field(default_factory=list)
    bad_answers: dict[str, list[int]] = field(default_factory=dict)
    sent_at: dict[tuple[str, int], float] = field(default_factory=dict)
    given_up: list[GivenUp] = field(default_factory=list)
    lost_stored_at: dict[tuple[str, int], list[int]] = field(default_factory=dict)
    """Per lost message, its `ORE_IN` sequences (empty: JetStream does not hold it)."""

    @property
    def clean(self) -> bool:
        return (
            self.verdict.clean
            and not self.given_up
            and self.store_report.clean
            and self.nodes_agree
            and not self.stopped_by_themselves
        )


class FixedRate:
    """Every thread of `load` sends its next message each `period` seconds until stopped."""

    def __init__(self, load: Load, period: float) -> None:
        self._load = load
        self._period = period
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = asyncio.Event()
        self.failed_publishes = 0

    def start(self) -> None:
        for index, thread_id in enumerate(self._load.threads):
            offset = self._period * index / len(self._load.threads)
            self._tasks.append(asyncio.create_task(self._run(thread_id, offset)))

    async def _run(self, thread_id: str, offset: float) -> None:
        await asyncio.sleep(offset)
        next_at = time.monotonic()
        while not self._stopping.is_set():
            try:
                await self._load.send(thread_id)
            except RuntimeError:  # never acknowledged: indeterminate, sent again as is
                self.failed_publishes += 1
            next_at += self._period
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), max(0.0, next_at - time.monotonic()))

    async def stop(self) -> None:
        """Stop sending; a publish under way finishes first (a cancelled one may have been
        stored without this side knowing its number)."""
        self._stopping.set()
        await asyncio.gather(*self._tasks, return_exceptions=True)


class Nemesis:
    """Applies one fault at a time to the cluster's nodes and the workers, and heals."""

    def __init__(
        self, cluster: EmbeddedNatsCluster, workers: Workers, rng: random.Random, hold: float
    ) -> None:
        self.cluster = cluster
        self.workers = workers
        self.rng = rng
        self.hold = hold
        self.started = time.monotonic()
        self.records: list[FaultRecord] = []

    def _node_name(self, node: EmbeddedNatsServer) -> str:
        return node.store_dir.name

    async def apply(self, kind: str) -> FaultRecord:
        began = time.monotonic()
        target = await getattr(self, "_" + kind.replace("-", "_"))()
        record = FaultRecord(kind, target, began - self.started, time.monotonic() - began)
        self.records.append(record)
        return record

    async def _kill_node(self) -> str:
        node = self.rng.choice(self.cluster.nodes)
        os.kill(node.pid, signal.SIGKILL)
        await asyncio.sleep(self.hold)
        await restart_nodes([node])
        return self._node_name(node)

    async def _kill_majority(self) -> str:
        nodes = self.rng.sample(self.cluster.nodes, 2)
        for node in nodes:
            os.kill(node.pid, signal.SIGKILL)
        await asyncio.sleep(self.hold)
        await restart_nodes(nodes)
        return "+".join(self._node_name(n) for n in nodes)

    async def _kill_all_nodes(self) -> str:
        nodes = self.cluster.nodes
        for node in nodes:
            os.kill(node.pid, signal.SIGKILL)
        await asyncio.sleep(1.0)
        await restart_nodes(nodes)
        return "all"

    async def _pause_node(self) -> str:
        node = self.rng.choice(self.cluster.nodes)
        os.kill(node.pid, signal.SIGSTOP)
        try:
            await asyncio.sleep(self.hold)
        finally:
            os.kill(node.pid, signal.SIGCONT)
        return self._node_name(node)

    async def _pause_worker(self) -> str:
        worker = self.rng.choice([w for w in self.workers.started if w.alive])
        worker.signal(signal.SIGSTOP)
        try:
            await asyncio.sleep(LEASE_TTL + 2.0)  # its leases lapse: a zombie when resumed
        finally:
            worker.signal(signal.SIGCONT)
        return f"worker pid {worker.pid}"

    async def _kill_worker(self) -> str:
        worker = self.rng.choice([w for w in self.workers.started if w.alive])
        worker.signal(signal.SIGKILL)
        await asyncio.to_thread(worker.process.wait)
        await self.workers.start(wait=False)
        return f"worker pid {worker.pid}"

    async def heal(self) -> None:
        """Everything resumed and running: nodes, and WORKERS workers serving."""
        for worker in self.workers.started:
            worker.signal(signal.SIGCONT)
        dead = [node for node in self.cluster.nodes if not node.running]
        for node in self.cluster.nodes:
            if node.running:
                os.kill(node.pid, signal.SIGCONT)
        if dead:
            await restart_nodes(dead)
        while sum(w.alive for w in self.workers.started) < WORKERS:
            await self.workers.start(wait=False)
        for worker in self.workers.started:
            if worker.alive:
                await self.workers.wait_serving(worker)


async def restart_nodes(nodes: list[EmbeddedNatsServer]) -> None:
    """Start killed nodes again on their ports and data, all launched before any is
    waited for (two of three need each other for a JetStream quorum)."""

    def restart() -> None:
        for node in nodes:
            node.stop()  # reaps the killed process
            node._launch()
        deadline = time.monotonic() + _NODE_READY
        for node in nodes:
            node._wait_ready(deadline)

    await asyncio.to_thread(restart)


def stream_states(node: EmbeddedNatsServer) -> dict[str, dict[str, Any]]:
    """ORE_IN and ORE_EVENTS as this node stores them (messages, first and last seq)."""
    url = f"{node.monitor_url}/jsz?accounts=true&streams=true"
    with urllib.request.urlopen(url, timeout=5) as response:
        jsz = json.loads(response.read())
    states = {}
    for account in jsz.get("account_details") or []:
        for stream in account.get("stream_detail") or []:
            if stream["name"] in ("ORE_IN", "ORE_EVENTS"):
                state = stream["state"]
                states[stream["name"]] = {
                    k: state.get(k) for k in ("messages", "first_seq", "last_seq")
                }
    return states


async def nodes_agree(cluster: EmbeddedNatsCluster, limit: float) -> tuple[bool, dict[str, Any]]:
    """Whether every node stores the same streams, waiting up to `limit` s for catch-up."""
    deadline = time.monotonic() + limit
    while True:
        states = {
            node.store_dir.name: await asyncio.to_thread(stream_states, node)
            for node in cluster.nodes
        }
        values = [json.dumps(s, sort_keys=True) for s in states.values()]
        if len(set(values)) == 1 and len(next(iter(states.values()))) == 2:
            return True, states
        if time.monotonic() > deadline:
            return False, states
        await asyncio.sleep(0.5)


async def cluster_client(cluster: EmbeddedNatsCluster) -> Client:
    async def quiet(error: Exception) -> None:
        """Reconnect errors are the point of the run."""

    return await nats.connect(
        servers=cluster.urls,
        reconnect_time_wait=0.1,
        max_reconnect_attempts=-1,
        ping_interval=1,  # a paused node is noticed in seconds, not minutes
        max_outstanding_pings=2,
        error_cb=quiet,
    )


Schedule = Callable[[Nemesis, float], Any]


async def fault_run(
    directory: Path,
    *,
    sync: str,
    seed: int,
    threads: int,
    period: float,
    quiet: float,
    kinds: list[str] | None,
    duration: float,
    gap: float,
    hold: float,
    drain: float,
    log: Callable[[str], None] = print,
) -> RunResult:
    """One run: `kinds` in that order (None: a random node fault every `gap` seconds for
    `duration`, a worker killed every minute and all nodes once, at half time)."""
    rng = random.Random(seed)
    cluster = EmbeddedNatsCluster(3, directory / "cluster", config=SyncPolicy(sync).server_config())
    await cluster.astart()
    workers = Workers(
        cluster.urls,
        directory,
        delay=0.05,
        partitions=PARTITIONS,
        ready_timeout=120.0,  # a fault run shares a loaded machine
        env={"ORE_NATS__REPLICAS": "3", "ORE_NATS__LEASE_TTL": str(LEASE_TTL)},
    )
    nc: Client | None = None
    given_up = MaxDeliveries()
    try:
        for _ in range(WORKERS):
            await workers.start()
        nc = await cluster_client(cluster)
        load = Load(nc, threads, prefix="c")
        await load.listen()
        await given_up.listen(nc)
        rate = FixedRate(load, period)
        rate.start()
        nemesis = Nemesis(cluster, workers, rng, hold)
        await asyncio.sleep(quiet)
        if kinds is not None:
            for kind in kinds:
                log(f"fault {kind}: {await nemesis.apply(kind)}")
                await asyncio.sleep(gap)
        else:
            await random_schedule(nemesis, duration, gap, log)
        await rate.stop()
        await nemesis.heal()
        log(f"healed; draining (sent {load.total_sent}, answered {load.answered()})")
        drained_at = time.monotonic()
        await load.wait_answered(drain)
        drain_seconds = time.monotonic() - drained_at
        agree, states = await nodes_agree(cluster, 60.0)
        answers = await stored_answers(nc)
        verdict, bad = check(dict(load.sent), answers, load.recorded)
        store_report = await load.audit(workers.store_path)
        inbound = await inbound_sequences(nc)
        return RunResult(
            sync=sync,
            sent=load.total_sent,
            answered=load.answered(),
            verdict=verdict,
            bad_threads=bad,
            store_report=store_report,
            nodes_agree=agree,
            node_states=states,
            faults=nemesis.records,
            drain_seconds=drain_seconds,
            stopped_by_themselves=[
                f"worker pid {w.pid} (exit status {w.process.returncode})"
                for w in workers.started
                if w.process.poll() is not None and w.process.returncode != -signal.SIGKILL
            ],
            bad_answers={thread_id: answers.get(thread_id, []) for thread_id in bad},
            sent_at={
                key: acked - nemesis.started
                for key, (_, acked) in load.sent_at.items()
                if key[0] in bad
            },
            given_up=given_up.given_up,
            lost_stored_at={
                (thread_id, n): inbound.get((thread_id, n), [])
                for thread_id in bad
                for n in range(1, load.sent[thread_id] + 1)
                if n not in answers.get(thread_id, []) and (thread_id, n) not in load.recorded
            },
        )
    finally:
        if nc is not None:
            await nc.close()
        workers.stop_all()
        await cluster.astop()


async def random_schedule(
    nemesis: Nemesis, duration: float, gap: float, log: Callable[[str], None]
) -> None:
    """Node faults every `gap` s; a worker killed each minute; all nodes once, half-way."""
    start = time.monotonic()
    next_worker_kill = start + 60.0
    all_nodes_done = False
    while time.monotonic() - start < duration:
        if time.monotonic() >= next_worker_kill:
            kind = "kill-worker"
            next_worker_kill += 60.0
        elif not all_nodes_done and time.monotonic() - start >= duration / 2:
            kind, all_nodes_done = "kill-all-nodes", True
        else:
            kind = nemesis.rng.choice(NODE_FAULTS)
        record = await nemesis.apply(kind)
        log(f"{record.at:7.1f}s {kind} {record.target} ({record.took:.1f}s)")
        await asyncio.sleep(gap)
