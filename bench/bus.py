"""What the bus costs: ore end to end against raw nats-py loops on the same server.

Run: `python bench/bus.py [--messages N] [--threads N] [--per-thread N]`.

One embedded nats-server (file storage); the worker side runs in this process, the
client side in a child process (as a conduit would), for every variant:
  raw request-reply       core NATS request; the responder echoes
  raw JetStream ingress   publish+ack to a stream, pull fetch, reply on core NATS, ack
  ore end to end          publish a user_message to `ore.in.NS.T`, wait for `lifecycle:
                          done` on `ore.out.NS.T`; CoreService + Manager + echo processor + store
                          (SQLite, and memory to separate the store's share)
Latency: sequential round trips of one thread (p50/p99). Throughput: 100 threads, each
sending its next message when the previous one is answered. Ratios are against the
raw JetStream ingress loop measured in the same run (absolute numbers on a shared
machine are noise).

Its raw JetStream baseline polls with `fetch(256, timeout=1)`, about 2x slower than a
streaming pull; `bench/hotpath.py` is the reference comparison (streaming pull,
pipelined acks, `ore serve` as a process, CPU and NATS messages per turn).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import nats
from hotpath import Waiters  # bench/ is on sys.path when a bench runs as a script
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig, StorageType, StreamConfig

from ore_core import Manager, Store, jsonutil
from ore_core.bus.server.embedded import EmbeddedNatsServer
from ore_core.bus.server.streams import BusConfig
from ore_core.bus.service import CoreService
from ore_core.session.echo import EchoProcessor
from ore_core.session.stores.memory import MemoryStore
from ore_core.session.stores.sqlite_store import SQLiteStore

TEXT = "hello"  # one word: the seven events of protocol.md
WARMUP = 200

Send = Callable[[str, int], Awaitable[None]]


def percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))]


# --- client side (child process) ---------------------------------------------------------


async def latency(send: Send, waiters: Waiters, messages: int) -> list[float]:
    samples = []
    for index in range(WARMUP + messages):
        started = time.perf_counter()
        done = waiters.expect("lat")
        await send("lat", index)
        await done
        if index >= WARMUP:
            samples.append((time.perf_counter() - started) * 1e3)
    return samples


async def throughput(send: Send, waiters: Waiters, threads: int, per_thread: int) -> float:
    async def converse(thread_id: str) -> None:
        for index in range(per_thread):
            done = waiters.expect(thread_id)
            await send(thread_id, index)
            await done

    started = time.perf_counter()
    await asyncio.gather(*(converse(f"tp{n}") for n in range(threads)))
    return threads * per_thread / (time.perf_counter() - started)


async def client_main(args: argparse.Namespace) -> dict[str, Any]:
    nc = await nats.connect(args.url)
    js = nc.jetstream()
    waiters = Waiters()
    run = args.run

    if args.client == "rr":

        async def request(thread_id: str, index: int) -> None:
            await nc.request("bench.rr", b"ping", timeout=5)
            waiters.resolve(thread_id)

        send: Send = request
    elif args.client == "raw":

        async def on_reply(msg: Msg) -> None:
            waiters.resolve(msg.subject.rpartition(".")[2])

        await nc.subscribe("raw.out.*", cb=on_reply)

        async def send_raw(thread_id: str, index: int) -> None:
            await js.publish(
                f"raw.in.{thread_id}",
                TEXT.encode(),
                headers={"Nats-Msg-Id": f"{thread_id}-{index}"},
            )

        send = send_raw
    else:

        async def on_event(msg: Msg) -> None:
            # Every handled message ends with a stored batch whose last event is `done`.
            if msg.headers is None or msg.headers.get("Ore-Kind") != "batch":
                return
            events = jsonutil.loads(msg.data)["events"]
            last = events[-1] if events else {}
            if last.get("kind") == "lifecycle" and last.get("phase") == "done":
                waiters.resolve(msg.subject.rpartition(".")[2].removeprefix(run))

        await nc.subscribe("ore.out.bench.*", cb=on_event)

        async def send_ore(thread_id: str, index: int) -> None:
            event_id = f"{run}{thread_id}-{index}"
            event = {"kind": "user_message", "id": event_id, "content": TEXT}
            await js.publish(
                f"ore.in.bench.{run}{thread_id}",
                jsonutil.dumps(event),
                headers={"Nats-Msg-Id": f"{run}{thread_id}:{event_id}"},
            )

        send = send_ore
    await nc.flush()
    samples = await latency(send, waiters, args.messages)
    rate = (
        await throughput(send, waiters, args.threads, args.per_thread)
        if args.client != "rr"
        else None
    )
    await nc.close()
    return {"latency": samples, "rate": rate}


async def run_client(url: str, kind: str, run: str, args: argparse.Namespace) -> dict[str, Any]:
    """Run the client side in a child process; adds the CPU this (worker) process spent."""
    started = time.process_time()
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        __file__,
        *("--client", kind, "--url", url, "--run", run),
        *("--messages", str(args.messages), "--threads", str(args.threads)),
        *("--per-thread", str(args.per_thread)),
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await child.communicate()
    if child.returncode != 0:
        raise RuntimeError(f"bench client {kind} failed with code {child.returncode}")
    result: dict[str, Any] = json.loads(out)
    total = WARMUP + args.messages + (args.threads * args.per_thread if result["rate"] else 0)
    result["worker_cpu_us"] = (time.process_time() - started) / total * 1e6
    return result


# --- worker side (this process) ------------------------------------------------------------


async def rr_worker(url: str) -> Client:
    nc = await nats.connect(url)

    async def respond(msg: Msg) -> None:
        await msg.respond(msg.data)

    await nc.subscribe("bench.rr", cb=respond)
    await nc.flush()
    return nc


async def raw_worker(nc: Client) -> None:
    """The JetStream ingress loop without ore: fetch, reply on core NATS, ack."""
    js = nc.jetstream()
    await js.add_stream(
        StreamConfig(
            name="RAW", subjects=["raw.in.*"], storage=StorageType.FILE, duplicate_window=120
        )
    )
    await js.add_consumer(
        "RAW", ConsumerConfig(durable_name="w", ack_policy=AckPolicy.EXPLICIT, max_ack_pending=1000)
    )
    sub = await js.pull_subscribe_bind("w", stream="RAW")
    while True:
        try:
            msgs = await sub.fetch(256, timeout=1.0)
        except TimeoutError:
            continue
        for msg in msgs:
            await nc.publish(f"raw.out.{msg.subject.rpartition('.')[2]}", msg.data)
            await msg.ack()


async def ore_worker(url: str, store: Store) -> CoreService:
    service = CoreService(
        Manager(store, EchoProcessor()), servers=[url], config=BusConfig(partitions=8)
    )
    await service.start()
    return service


async def main(args: argparse.Namespace) -> None:
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="ore-bench-") as tmp:
        root = Path(tmp)
        async with EmbeddedNatsServer(root / "nats") as server:
            url = server.url
            responder = await rr_worker(url)
            results["raw request-reply"] = await run_client(url, "rr", "", args)
            await responder.close()

            worker = await nats.connect(url)
            loop = asyncio.get_running_loop().create_task(raw_worker(worker))
            results["raw JetStream ingress"] = await run_client(url, "raw", "", args)
            loop.cancel()
            await asyncio.gather(loop, return_exceptions=True)
            await worker.close()

            for name, store, run in (
                ("sqlite", SQLiteStore(root / "ore.db"), "s"),
                ("memory", MemoryStore(), "m"),
            ):
                service = await ore_worker(url, store)
                results[f"ore end to end ({name})"] = await run_client(url, "ore", run, args)
                await service.stop()
                await store.close()
    report(results, args)


def report(results: dict[str, dict[str, Any]], args: argparse.Namespace) -> None:
    raw = results["raw JetStream ingress"]
    raw_p50, raw_rate = percentile(raw["latency"], 0.5), raw["rate"]
    print(
        f"python {sys.version.split()[0]}, {os.cpu_count()} cpus, load {os.getloadavg()[0]:.1f}; "
        f"latency: {args.messages} sequential messages; throughput: {args.threads} threads "
        f"x {args.per_thread} messages"
    )
    print()
    header = ("p50 ms", "p99 ms", "p50/raw", "msg/s", "msg/s/raw", "worker µs/msg")
    print(f"{'':<26}" + "".join(f"{h:>14}" for h in header))
    for name, result in results.items():
        p50, p99 = percentile(result["latency"], 0.5), percentile(result["latency"], 0.99)
        rate = result["rate"]
        cells = [f"{p50:.3f}", f"{p99:.3f}", f"{p50 / raw_p50:.2f}"]
        cells += [f"{rate:,.0f}", f"{rate / raw_rate:.2f}"] if rate else ["", ""]
        cells.append(f"{result['worker_cpu_us']:.0f}")
        print(f"{name:<26}" + "".join(f"{c:>14}" for c in cells))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--threads", type=int, default=100)
    parser.add_argument("--per-thread", type=int, default=50)
    parser.add_argument("--client", choices=["rr", "raw", "ore"], help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--run", default="", help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.client:
        print(json.dumps(asyncio.run(client_main(arguments))))
    else:
        asyncio.run(main(arguments))
