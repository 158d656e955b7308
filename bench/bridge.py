"""What a relay hop costs: latency from endpoint A to endpoint B, and the core's CPU per copy.

Run: `python bench/bridge.py [--gateways 1,100] [--samples N] [--media 1,20]` (not a test)

One embedded nats-server and one real `ore serve` process (SQLite store, echo processor
without delay, via tests/scale/harness.py). Endpoints are raw protocol.md clients in
this process, as a conduit's wire: a message is a JetStream publish to
`ore.in.NS.T`, what an endpoint shows is what arrives on `ore.out.NS.*`.

- Baseline, a conduit's own round trip: endpoint `alpha` sends to a thread of its own
  and waits for the echo answer (`turn_complete`, assistant) on its own subject.
- Relay: threads of `alpha` linked to `beta` (`answer = "none"`, a pure relay); `alpha`
  sends and the time is taken when the user turn arrives on `ore.out.beta.T`.
Both at 1 and at 100 concurrent gateways (threads, each with one message in flight),
p50/p99, and the ratio relay / round trip (goal of issue 29: at most 1.5x). Where the
relay's time goes: the last column is when the same relayed message reaches `alpha`
itself (the server's republish of the stored batch); the copy to `beta` is published
by the core once JetStream acknowledged that batch, so relay minus that column is the
acknowledgement's way back to the core plus the copy's publish.

CPU of the `ore serve` process (/proc schedstat of its threads) per answered turn (the round trips),
per relayed message (recorded + one copy), and per copy: the extra CPU of threads
linked to four namespaces over threads linked to one, divided by the three extra copies
(goal: a copy at most half a turn). Absolute numbers on a shared machine are noise;
compare the columns of one run.

Media (issue 39): a 1 MB and a 20 MB file from `alpha`'s upload to `beta` holding its
bytes (the copy's turn arrived and `files.read` fetched it), against putting the same
size into the bucket and reading it back once, in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import nats
from nats.aio.client import Client
from nats.aio.msg import Msg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ore_core import ConduitClient
from ore_core.artifacts.attachment import Attachment
from ore_core.bus.server.embedded import EmbeddedNatsServer
from ore_core.files.policy import FilePolicy
from ore_core.files.store import FileStore
from ore_core.subjects import Subjects
from tests.scale.harness import Workers

COPIES = ("beta", "gamma", "delta", "epsilon")  # namespaces a relayed thread is shown on


def cpu_seconds(pid: int) -> float:
    """Time on a CPU of every thread of process `pid` (schedstat: ns, not 10 ms ticks)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            pass  # a thread that ended meanwhile
    return total / 1e9


class Endpoints:
    """Raw endpoints of every namespace: send, and wait for a turn on one's subject."""

    def __init__(self, nc: Client) -> None:
        self.nc = nc
        self.js = nc.jetstream()
        self._waiting: dict[tuple[str, str, str], asyncio.Future[float]] = {}

    async def listen(self) -> None:
        await self.nc.subscribe("ore.out.*.*", cb=self._receive)

    async def _receive(self, msg: Msg) -> None:
        _, _, namespace, thread = msg.subject.split(".")
        message = json.loads(msg.data)
        events = message["events"] if message.get("kind") == "batch" else [message]
        for event in events:
            if event.get("kind") == "turn_complete":
                key = (namespace, thread, event["turn"]["role"])
                waiter = self._waiting.pop(key, None)
                if waiter is not None and not waiter.done():
                    waiter.set_result(time.perf_counter())

    async def send(
        self, namespace: str, thread: str, text: str, attachments: tuple[Attachment, ...] = ()
    ) -> None:
        event_id = uuid.uuid4().hex
        body: dict[str, Any] = {"kind": "user_message", "id": event_id, "content": text}
        if attachments:
            body["attachments"] = [file.to_dict() for file in attachments]
        await self.js.publish(
            f"ore.in.{namespace}.{thread}",
            json.dumps(body).encode(),
            headers={"Nats-Msg-Id": f"{thread}:{event_id}"},
            timeout=30,
        )

    def expect(self, receiver: str, thread: str, role: str) -> asyncio.Future[float]:
        """When the next `role` turn of `thread` arrives on `receiver`'s subject."""
        waiter: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        self._waiting[(receiver, thread, role)] = waiter
        return waiter

    async def hop(self, sender: str, thread: str, *waits: tuple[str, str]) -> list[float]:
        """Seconds from `sender`'s publish to each (receiver, role) turn on its subject."""
        waiters = [self.expect(receiver, thread, role) for receiver, role in waits]
        started = time.perf_counter()
        await self.send(sender, thread, "hello")
        async with asyncio.timeout(60):
            return [await waiter - started for waiter in waiters]


async def admin(nc: Client, method: str, body: dict[str, Any]) -> dict[str, Any]:
    reply = await nc.request(f"ore.admin.{method}", json.dumps(body).encode(), timeout=30)
    answer: dict[str, Any] = json.loads(reply.data)
    assert "error" not in answer, answer
    return answer


async def make_threads(nc: Client, prefix: str, count: int, copies: int) -> list[str]:
    """`count` threads of `alpha`, each linked to the first `copies` of COPIES."""
    threads = [f"{prefix}-{n}" for n in range(count)]
    for thread in threads:
        await admin(nc, "threads.create", {"id": thread, "namespace": "alpha"})
        for namespace in COPIES[:copies]:
            endpoint = {"namespace": namespace, "key": f"{namespace}.room", "value": thread}
            body = {"thread": thread, "endpoint": endpoint, "answer": "none"}
            await admin(nc, "links.add", body)
    return threads


async def rounds(
    endpoints: Endpoints, threads: list[str], samples: int, *waits: tuple[str, str]
) -> list[list[float]]:
    """Latencies of `samples` hops, `len(threads)` at a time (one per thread), one list
    per (receiver, role) waited for."""
    columns: list[list[float]] = [[] for _ in waits]
    while len(columns[0]) < samples:
        hops = await asyncio.gather(*(endpoints.hop("alpha", t, *waits) for t in threads))
        for hop in hops:
            for column, latency in zip(columns, hop, strict=True):
                column.append(latency)
    return columns


def quantiles(latencies: list[float]) -> tuple[float, float]:
    cuts = statistics.quantiles(latencies, n=100)
    return cuts[49] * 1000, cuts[98] * 1000


async def media(url: str, endpoints: Endpoints, sizes_mb: list[int], samples: int) -> None:
    """A file from `alpha`'s upload to its bytes fetched by `beta` on a linked thread (what
    a conduit does before it posts the copy), against the same bytes put into the bucket
    and read back once with the core's own `FileStore`: one copy in, one out."""
    bucket = FileStore(endpoints.js, Subjects().files_bucket, FilePolicy(max_size=1 << 30))
    alpha = await ConduitClient.connect(url, name="alpha")
    beta = await ConduitClient.connect(url, name="beta")
    (thread,) = await make_threads(endpoints.nc, "media", 1, copies=1)
    print(f"\nmedia, alpha -> beta, against the bytes once through NATS (median of {samples})")
    print(f"{'size':>6}  {'once ms':>9}  {'relayed ms':>10}  ratio")
    try:
        for size_mb in sizes_mb:
            once: list[float] = []
            relayed: list[float] = []
            for _ in range(samples):
                data = os.urandom(size_mb * 1_000_000)  # new bytes: nothing is stored yet
                started = time.perf_counter()
                await bucket.fetch(await bucket.upload(data, "once.pdf"))
                once.append(time.perf_counter() - started)
                data = os.urandom(size_mb * 1_000_000)
                started = time.perf_counter()
                sent = await alpha.upload(data, "report.pdf")
                shown = endpoints.expect("beta", thread, "user")
                await endpoints.send("alpha", thread, "the report", (sent,))
                await shown
                assert await beta.fetch(thread, sent) == data
                relayed.append(time.perf_counter() - started)
            o50, r50 = statistics.median(once) * 1000, statistics.median(relayed) * 1000
            print(f"{size_mb:>4}MB  {o50:>9.1f}  {r50:>10.1f}  {r50 / o50:5.2f}x")
    finally:
        await alpha.close()
        await beta.close()


async def main(gateways: list[int], samples: int, media_mb: list[int]) -> None:
    with (
        tempfile.TemporaryDirectory(prefix="ore-bench-bridge-") as tmp,
        EmbeddedNatsServer(Path(tmp) / "nats") as server,
    ):
        workers = Workers([server.url], Path(tmp), delay=0.0, partitions=8)
        try:
            worker = await workers.start()
            nc = await nats.connect(server.url)
            try:
                await measure(nc, worker.pid, gateways, samples)
                if media_mb:
                    endpoints = Endpoints(nc)
                    await endpoints.listen()
                    await media(server.url, endpoints, media_mb, max(3, samples // 60))
            finally:
                await nc.close()
        finally:
            workers.stop_all()


async def measure(nc: Client, pid: int, gateways: list[int], samples: int) -> None:
    endpoints = Endpoints(nc)
    await endpoints.listen()
    print(f"relay latency, alpha -> beta, against alpha's own round trip ({samples}+ samples)")
    print(
        f"{'gateways':>8}  {'round trip p50/p99 ms':>22}  {'relay p50/p99 ms':>18}  ratio p50/p99"
    )
    cpu: dict[str, float] = {}
    for count in gateways:
        own = await make_threads(nc, f"own{count}", count, copies=0)
        linked = await make_threads(nc, f"relay{count}", count, copies=1)
        await rounds(endpoints, own, count, ("alpha", "assistant"))  # warm up
        await rounds(endpoints, linked, count, ("beta", "user"))
        before = cpu_seconds(pid)
        (trips,) = await rounds(endpoints, own, samples, ("alpha", "assistant"))
        cpu[f"turn{count}"] = (cpu_seconds(pid) - before) / len(trips)
        before = cpu_seconds(pid)
        relays, home = await rounds(endpoints, linked, samples, ("beta", "user"), ("alpha", "user"))
        cpu[f"relay{count}"] = (cpu_seconds(pid) - before) / len(relays)
        (t50, t99), (r50, r99), (h50, h99) = quantiles(trips), quantiles(relays), quantiles(home)
        print(
            f"{count:>8}  {t50:>10.2f} / {t99:>8.2f}  {r50:>8.2f} / {r99:>7.2f}"
            f"  {r50 / t50:6.2f}x / {r99 / t99:5.2f}x  {h50:>13.2f} / {h99:>8.2f}"
        )
    count = max(gateways)
    fanned = await make_threads(nc, f"fan{count}", count, copies=len(COPIES))
    await rounds(endpoints, fanned, count, ("beta", "user"))
    before = cpu_seconds(pid)
    (relays,) = await rounds(endpoints, fanned, samples, ("beta", "user"))
    per_fanned = (cpu_seconds(pid) - before) / len(relays)
    per_copy = (per_fanned - cpu[f"relay{count}"]) / (len(COPIES) - 1)
    turn = cpu[f"turn{count}"]
    print(f"\ncore CPU (ore serve, {count} gateways at a time)")
    print(f"  per answered turn (round trip)         {turn * 1e3:7.3f} ms")
    print(f"  per relayed message (turn + 1 copy)    {cpu[f'relay{count}'] * 1e3:7.3f} ms")
    print(f"  per relayed message (turn + 4 copies)  {per_fanned * 1e3:7.3f} ms")
    print(
        f"  per extra copy                         {per_copy * 1e3:7.3f} ms"
        f" = {per_copy / turn:.2f} of a turn"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gateways", default="1,100", help="concurrent gateways, comma-separated")
    parser.add_argument("--samples", type=int, default=300, help="hops measured per figure")
    parser.add_argument(
        "--media", default="1,20", help="file sizes in MB for the media row ('' for none)"
    )
    args = parser.parse_args()
    sizes = [int(n) for n in args.media.split(",") if n]
    asyncio.run(main([int(n) for n in args.gateways.split(",")], args.samples, sizes))
