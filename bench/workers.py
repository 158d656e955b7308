"""Several `ore serve` workers on one NATS: throughput, failover and memory per thread.

Run: `python bench/workers.py [--threads N] [--seconds S] [--threads-idle N] [--only PART]`
(not a test)

Every worker is a real `ore serve` process (echo processor, one shared SQLite store,
32 partitions) on one embedded nats-server; the load is raw protocol.md traffic from
this process (tests/scale/harness.py), audited from what was stored.

1. Throughput with 1, 2 and 3 workers: `--threads` conversations, each sending its
   next message as soon as the previous one is answered, for `--seconds`. Reported as
   answers per second and the ratio to one worker. On this 2-core machine the
   nats-server, the load and the workers share the cores, so more workers cannot
   add much; the figure shows what ownership costs and that nothing is lost.
2. Failover: 2 workers under load (a 0.2 s turn), one is killed with SIGKILL; the time
   until the last of its busy threads is answered again (three kills).
3. Memory: one worker answers one message on each of `--threads-idle` new threads,
   three times; its RSS after each batch, with idle eviction off (every thread stays
   loaded) and on (`session.idle_timeout` 3 s).
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import tempfile
import time
from pathlib import Path

import nats

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ore_core.bus.server.embedded import EmbeddedNatsServer
from ore_core.subjects import partition_of
from tests.scale.harness import Load, Workers, held_by, leases

PARTITIONS = 32


def rss_kib(pid: int) -> int:
    """Resident set size of a process, from /proc (Linux)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


async def wait_balanced(nc: nats.NATS, pool: Workers) -> None:
    alive = [w for w in pool.started if w.alive]
    async with asyncio.timeout(60):
        while True:
            table = await leases(nc)
            counts = [len(held_by(table, w)) for w in alive]
            if sum(counts) == PARTITIONS and min(counts) >= PARTITIONS // len(alive) - 1:
                return
            await asyncio.sleep(0.1)


async def closed_loop(load: Load, seconds: float) -> tuple[int, float]:
    """Each thread sends its next message when the last one is answered; answers/s."""
    stop = time.monotonic() + seconds

    async def conversation(thread_id: str) -> None:
        while time.monotonic() < stop:
            await load.send(thread_id)
            async with asyncio.timeout(60):
                await load.answer(thread_id, load.sent[thread_id])

    started = time.monotonic()
    await asyncio.gather(*(conversation(t) for t in load.threads))
    return load.answered(), time.monotonic() - started


async def throughput(url: str, base: Path, workers: int, threads: int, seconds: float) -> float:
    pool = Workers([url], base / f"tp{workers}", delay=0.0, partitions=PARTITIONS)
    pool.directory.mkdir()
    nc = await nats.connect(url)
    try:
        for _ in range(workers):
            await pool.start()
        await wait_balanced(nc, pool)
        load = Load(nc, threads, prefix=f"w{workers}t")
        await load.listen()
        count, elapsed = await closed_loop(load, seconds)
        report = await load.audit(pool.store_path)
        rate = count / elapsed
        print(
            f"  {workers} worker(s): {rate:7.0f} answers/s  ({count} in {elapsed:.1f}s; "
            f"lost {report.lost}, doubled {report.doubled}, "
            f"out of order {report.order_violations})"
        )
        return rate
    finally:
        pool.stop_all()
        await nc.close()


async def failover(url: str, base: Path, kills: int) -> list[float]:
    pool = Workers([url], base / "failover", delay=0.2, partitions=PARTITIONS)
    pool.directory.mkdir()
    nc = await nats.connect(url)
    times = []
    try:
        await pool.start()
        await pool.start()
        await wait_balanced(nc, pool)
        load = Load(nc, 100, prefix="f")
        await load.listen()
        for _ in range(kills):
            await load.send_round()
            victim = next(w for w in pool.started if w.alive)
            owned = set(held_by(await leases(nc), victim))
            busy = {t for t in load.threads if partition_of(t, PARTITIONS) in owned}
            moment = time.monotonic()
            victim.signal(signal.SIGKILL)
            await victim.wait()
            await pool.start()  # a replacement joins
            await load.wait_answered(60)
            first = load.first_answer_after(moment, busy)
            times.append(max(first.values(), default=float("nan")))
            await wait_balanced(nc, pool)
        report = await load.audit(pool.store_path)
        print(
            f"  kill -9 of one of 2 workers, {kills} times: resumed after "
            + ", ".join(f"{t:.2f}s" for t in times)
            + f"  (lost {report.lost}, doubled {report.doubled}, "
            f"out of order {report.order_violations})"
        )
        return times
    finally:
        pool.stop_all()
        await nc.close()


async def memory(url: str, base: Path, threads: int, rounds: int = 3) -> None:
    """RSS of one worker over `rounds` batches of `threads` new threads, each answered
    once then left idle: without eviction it grows with every thread ever touched, with
    `session.idle_timeout` it stays flat (freed objects are reused by the next batch)."""
    for label, timeout in (("idle_timeout 0 (kept)", "0"), ("idle_timeout 3 s", "3")):
        env = {"ORE_SESSION__IDLE_TIMEOUT": timeout}
        pool = Workers([url], base / f"memory-{timeout}", delay=0.0, partitions=PARTITIONS, env=env)
        pool.directory.mkdir()
        nc = await nats.connect(url)
        try:
            worker = await pool.start()
            await asyncio.sleep(1.0)
            before = rss_kib(worker.pid)
            sizes = []
            for n in range(rounds):
                load = Load(nc, threads, prefix=f"m{timeout}r{n}-")
                await load.listen()
                for start in range(0, threads, 500):  # in batches: the publisher is not the point
                    await asyncio.gather(*(load.send(t) for t in load.threads[start : start + 500]))
                await load.wait_answered(120)
                await asyncio.sleep(6.0)  # past an idle_timeout of 3 s, swept a few times
                sizes.append(rss_kib(worker.pid))
            grown = (sizes[-1] - before) * 1024 / (threads * rounds)
            steps = " -> ".join(f"{kib / 1024:.0f}" for kib in [before, *sizes])
            print(
                f"  {label}: RSS {steps} MiB over {rounds} x {threads} threads; "
                f"{grown / 1024:.1f} KiB per thread ever touched"
            )
        finally:
            pool.stop_all()
            await nc.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--threads-idle", type=int, default=2000)
    parser.add_argument("--kills", type=int, default=3)
    parser.add_argument(
        "--only", choices=("throughput", "failover", "memory"), help="run one part only"
    )
    args = parser.parse_args()
    parts = {args.only} if args.only else {"throughput", "failover", "memory"}
    with tempfile.TemporaryDirectory(prefix="ore-bench-workers-") as tmp:
        base = Path(tmp)
        with EmbeddedNatsServer(base / "nats") as server:
            if "throughput" in parts:
                print(f"throughput, {args.threads} conversations, closed loop, echo, SQLite:")
                rates = {}
                for count in (1, 2, 3):
                    rates[count] = await throughput(
                        server.url, base, count, args.threads, args.seconds
                    )
                print(
                    "  ratio to 1 worker: "
                    + ", ".join(f"{c} workers {rates[c] / rates[1]:.2f}x" for c in (2, 3))
                )
            if "failover" in parts:
                print("failover:")
                await failover(server.url, base, args.kills)
            if "memory" in parts:
                print("memory per idle thread (one worker):")
                await memory(server.url, base, args.threads_idle)


if __name__ == "__main__":
    asyncio.run(main())
