"""Does the core's memory grow with the backlog of a linked endpoint that is down?

Run: `python bench/bridge_down.py [--messages N] [--warmup N] [--trace N]` (not a test)

Issue 29 promises that a down endpoint's backlog waits in durable storage, not in a
process's memory. One embedded nats-server and one real `ore serve` process (SQLite
store, its own XDG dirs, via tests/scale/harness.py). Two SDK `ConduitClient`s are the
endpoints: namespace `a` sends, namespace `b` reads with a durable feed; each thread of
`a` is linked to `b` by the admin `links.add` with `answer = "none"` (a human relay).

- Baseline: thread `up`, `b` connected: `a` sends N messages.
- Down: thread `down`, `b`'s client closed (its durable cursor kept by the core):
  `a` sends N messages. Then `b` connects again and must catch up on all of them, in
  the order they were sent, once each.
The RSS of `ore serve` (VmRSS) is sampled after the warm-up and every N/10 messages; the
slope (least squares, KiB per 1,000 messages) of the down run against the baseline's
tells what being down costs. RSS on a shared machine is noisy: compare the two runs.

`--trace N`: instead, the core in this process (same store, same relay, `b` down) and
tracemalloc's largest growths over N messages, to find where memory goes.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ore_core import ConduitClient, Manager, TurnCompleteEvent
from ore_core.artifacts import Text
from ore_core.bus.server.embedded import EmbeddedNatsServer
from ore_core.bus.server.streams import BusConfig
from ore_core.bus.service import CoreService
from ore_core.conduit.control import ControlClient
from ore_core.session.echo import EchoProcessor
from ore_core.session.stores.sqlite_store import SQLiteStore
from tests.scale.harness import Workers

DURABLE = "bench"


def rss_kib(pid: int) -> int:
    """Resident set size of process `pid` (VmRSS of /proc/PID/status, KiB)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


def slope(points: list[tuple[int, int]]) -> float:
    """Least-squares slope of (messages, KiB), in KiB per 1,000 messages."""
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    var = sum((x - mx) ** 2 for x, _ in points)
    return 1000 * sum((x - mx) * (y - my) for x, y in points) / var


class Reader:
    """An endpoint's feed of one thread, recording the texts of stored user turns:
    `b`'s is durable; `a`'s is live, to know what the core recorded."""

    def __init__(self, url: str, thread: str, namespace: str, durable: str | None) -> None:
        self.url = url
        self.thread = thread
        self.namespace = namespace
        self.durable = durable
        self.texts: list[str] = []
        self.changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._client: ConduitClient | None = None

    async def start(self) -> None:
        self._client = await ConduitClient.connect(
            self.url, name=self.namespace, request_timeout=30.0
        )
        ready = asyncio.Event()
        self._task = asyncio.create_task(self._read(self._client, ready))
        await ready.wait()

    async def _read(self, client: ConduitClient, ready: asyncio.Event) -> None:
        async with client.events(self.thread, durable=self.durable) as feed:
            ready.set()
            async for delivery in feed:
                event = delivery.event
                if (
                    isinstance(event, TurnCompleteEvent)
                    and delivery.sequence is not None
                    and event.turn.role == "user"
                ):
                    (artifact,) = event.turn.artifacts
                    assert isinstance(artifact, Text)
                    self.texts.append(artifact.content)
                    self.changed.set()

    async def until(self, count: int, limit: float = 600.0) -> None:
        """Wait until `count` user turns arrived."""
        async with asyncio.timeout(limit):
            while len(self.texts) < count:
                self.changed.clear()
                await self.changed.wait()

    async def stop(self) -> None:
        """Disconnect (the core keeps the durable cursor: what follows waits for `b`)."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._client is not None:
            await self._client.close()


async def link(a: ConduitClient, thread: str) -> None:
    await ControlClient.beside(a).call("threads.create", {"id": thread, "namespace": "a"})
    endpoint = {"namespace": "b", "key": "b.room", "value": thread}
    await ControlClient.beside(a).call(
        "links.add", {"thread": thread, "endpoint": endpoint, "answer": "none"}
    )


async def send(a: ConduitClient, thread: str, first: int, count: int) -> None:
    for n in range(first, first + count):
        await a.send(thread, f"{thread} {n}")


async def run(
    a: ConduitClient, recorded: Reader, pid: int, messages: int, warmup: int
) -> list[tuple[int, int]]:
    """Send `messages` on a thread in tenths; RSS after the warm-up and after the core
    recorded each tenth (sends return once stored in the ingress stream, before that)."""
    step = max(1, messages // 10)
    points = [(0, rss_kib(pid))]
    sent = 0
    while sent < messages:
        count = min(step, messages - sent)
        await send(a, recorded.thread, warmup + sent, count)
        sent += count
        await recorded.until(warmup + sent)
        points.append((sent, rss_kib(pid)))
    return points


def show(name: str, points: list[tuple[int, int]]) -> None:
    cells = "  ".join(f"{kib / 1024:6.1f}" for _, kib in points)
    print(f"  {name:<9} {cells}  MiB")


async def measure(url: str, pid: int, messages: int, warmup: int) -> None:
    a = await ConduitClient.connect(url, name="a", request_timeout=30.0)
    up, down = Reader(url, "up", "b", DURABLE), Reader(url, "down", "b", DURABLE)
    home = {thread: Reader(url, thread, "a", None) for thread in ("up", "down")}
    try:
        for reader in (up, down):
            await link(a, reader.thread)
            await home[reader.thread].start()
            await reader.start()
            await send(a, reader.thread, 0, warmup)
            await reader.until(warmup)
        started = time.perf_counter()
        baseline = await run(a, home["up"], pid, messages, warmup)
        await up.until(warmup + messages)
        await down.stop()
        sent_down = time.perf_counter()
        backlog = await run(a, home["down"], pid, messages, warmup)
        caught_up = time.perf_counter()
        await down.start()
        await down.until(warmup + messages)
        await asyncio.sleep(1.0)  # anything doubled after the last would show now
        done = time.perf_counter()
        after = rss_kib(pid)
    finally:
        for reader in (up, down, *home.values()):
            await reader.stop()
        await a.close()
    print(f"ore serve RSS, {messages} messages a -> b, sampled every {max(1, messages // 10)}")
    print(f"  {'messages':<9} " + "  ".join(f"{x:>6}" for x, _ in baseline))
    show("b up", baseline)
    show("b down", backlog)
    base, cost = slope(baseline), slope(backlog)
    print(f"  slope KiB/1000 messages: b up {base:.1f}, b down {cost:.1f}", end="")
    print(f" (down / up {cost / base:.2f})" if base > 0 else "")
    print(f"  after b caught up: {after / 1024:.1f} MiB")
    expected = [f"down {n}" for n in range(warmup + messages)]
    got = down.texts
    delivered = len(set(got) & set(expected))
    doubled = len(got) - len(set(got))
    numbers = [int(text.split()[1]) for text in got]
    disorder = sum(1 for x, y in itertools.pairwise(numbers) if y < x)
    print(f"catch-up of b ({warmup} before it went down + {messages} while down)")
    print(
        f"  expected {len(expected)}  delivered {delivered}  lost {len(expected) - delivered}"
        f"  doubled {doubled}  out of order {disorder}"
        f"  exact {got == expected}"
    )
    print(
        f"  time: b up {sent_down - started:.0f} s, b down {caught_up - sent_down:.0f} s,"
        f" catch-up {done - caught_up - 1:.0f} s"
    )


async def trace(url: str, messages: int, warmup: int) -> None:
    """In-process variant: where the core's memory grows while `b` is down (tracemalloc)."""
    with tempfile.TemporaryDirectory(prefix="ore-bench-bridge-trace-") as tmp:
        store = SQLiteStore(Path(tmp) / "threads.db")
        async with Manager(store, EchoProcessor()) as manager:
            core = CoreService(manager, servers=[url], config=BusConfig(partitions=8))
            await core.start()
            a = await ConduitClient.connect(url, name="a", request_timeout=30.0)
            home, down = Reader(url, "down", "a", None), Reader(url, "down", "b", DURABLE)
            await link(a, "down")
            await home.start()
            await down.start()
            await send(a, "down", 0, warmup)
            await down.until(warmup)
            await down.stop()
            tracemalloc.start(12)
            before = tracemalloc.take_snapshot()
            await send(a, "down", warmup, messages)
            await home.until(warmup + messages)
            after = tracemalloc.take_snapshot()
            tracemalloc.stop()
            await home.stop()
            await a.close()
            await core.stop(grace=0)
    print(f"in-process core, b down, {messages} messages: largest growths (KiB per 1,000)")
    for stat in after.compare_to(before, "traceback")[:8]:
        frames = [
            f"{Path(f.filename).name}:{f.lineno}"
            for f in stat.traceback
            if "ore_core" in f.filename
        ]
        print(f"  {stat.size_diff / 1024 / messages * 1000:8.1f}  {' < '.join(frames[-1:-6:-1])}")


async def main(messages: int, warmup: int, traced: int) -> None:
    with (
        tempfile.TemporaryDirectory(prefix="ore-bench-bridge-down-") as tmp,
        EmbeddedNatsServer(Path(tmp) / "nats") as server,
    ):
        if traced:
            await trace(server.url, traced, warmup)
            return
        workers = Workers([server.url], Path(tmp), delay=0.0, partitions=8)
        try:
            worker = await workers.start()
            await measure(server.url, worker.pid, messages, warmup)
        finally:
            workers.stop_all()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20_000, help="messages per run")
    parser.add_argument("--warmup", type=int, default=500, help="messages before sampling")
    parser.add_argument(
        "--trace", type=int, default=0, metavar="N", help="instead: tracemalloc, N messages"
    )
    args = parser.parse_args()
    asyncio.run(main(args.messages, args.warmup, args.trace))
