"""What nats-server spends per turn: the floor changed one step at a time toward ore.

Run: `python bench/natscost.py --variants base,part32,ore,ore1 [--rounds 5]
[--per-thread 60] [--idle 5] [--store-root DIR]` (not a test; about 15 s per side).

Why: `bench/hotpath.py --floor` showed nats-server working about twice as hard per
turn for `ore serve` as for the floor with the same NATS message counts (4 in, 5 out,
2 stored). This script runs the floor worker of `hotpath.py` with ore's stream and
consumer settings switched on one at a time, so each setting's cost on the server can
be read off. Every side gets a fresh nats-server (no other side's streams or consumers
weigh on it), the rounds alternate the order of the sides, and the table gives the
median and the range over the rounds: on a shared 2-core machine a single run of one
side proves nothing.

A variant is `base` (the floor as in hotpath.py), `oreN` (`ore serve` with
`ORE_NATS__PARTITIONS=N`; plain `ore` is the default 32), or floor features joined with
`+`:
  hdr    `Ore-Kind`/`Ore-Schema` on the ingress message, the live batch and the stored
         batch, and ore's ingress JSON and `Nats-Msg-Id` (`T:id`)
  msgid  `Nats-Msg-Id` on the stored batch (the out stream's duplicate window tracks it)
  fence  `Nats-Expected-Last-Subject-Sequence` on the stored batch, a thread's stored
         batches sent one after the other on their publish acks (ore's pipeline)
  repub  the stored batch goes to `floor.ev.T` and the stream republishes it to
         `floor.out.T` (ORE_EVENTS' RePublish), instead of the client hearing the publish
  evcfg  the out stream's other ORE_EVENTS settings (discard old, max_age, max_bytes,
         30 s duplicate window, allow_direct)
  incfg  ORE_IN's settings (discard new, max_age, max_msg_size) and the consumer's
         (ack_wait, backoff, max_deliver)
  partN  N ingress partitions: subject transform `floor.in.T` -> `floor.inp.<p>.T`, a
         durable consumer filtered on each partition and a streaming pull per consumer
  mem    the ingress consumers keep their state in memory (`mem_storage`; not something
         ore can do: the state would not survive a server restart)
  kv     ore's lease traffic: 33 keys of a KV bucket (4 s TTL) renewed each second by
         compare-and-set, and a watcher on the bucket
  slowN  the worker spins N µs per message, to compare the server's cost per turn at a
         lower turn rate (what is per second, not per turn, shows up here)

Per side, around the throughput phase (100 threads by default): nats-server CPU per
turn (schedstat), the worker's and the client's, `/varz` messages and bytes in/out per
turn, the server's read/write syscalls (`/proc/PID/io`) and context switches per turn,
and turns per second; `--idle S` adds the server's CPU per second with the side
connected and idle. The per-connection `/connz` figures (pull requests and KV traffic
are the worker's messages in beyond its 3 per turn) are in the JSON lines on stderr.
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
from collections import deque
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parents[1]))
sys.path.insert(0, str(HERE.parent))

import hotpath  # noqa: E402
from hotpath import (  # noqa: E402
    Child,
    FloorSave,
    Waiters,
    converse,
    cpu_ns,
    floor_commit,
    floor_schema,
    floor_stamp,
    floor_turn,
    get_json,
    say,
)

PULL_BATCH = 256
DAY = 24 * 3600.0
ORE_BACKOFF = [30.0, 60.0, 120.0, 240.0, 300.0]


def features(variant: str) -> set[str]:
    return set() if variant in ("base", "") else set(variant.split("+"))


def numbered(feats: set[str], name: str) -> int:
    """N of feature `nameN` (0 when absent)."""
    return next((int(f[len(name) :]) for f in feats if f.startswith(name)), 0)


# --- floor worker with features -------------------------------------------------------


async def worker_main(args: argparse.Namespace) -> None:
    """hotpath.py's floor worker, with the features of `args.variant`."""

    import nats
    import orjson
    from nats.aio.msg import Msg
    from nats.js.api import (
        AckPolicy,
        ConsumerConfig,
        DiscardPolicy,
        RePublish,
        StorageType,
        StreamConfig,
        SubjectTransform,
    )

    feats = features(args.variant)
    parts = numbered(feats, "part")
    slow = numbered(feats, "slow") / 1e6
    nc = await nats.connect(args.url, name="floor-worker")
    js = nc.jetstream()
    transform = None
    if parts:
        dest = f"floor.inp.{{{{partition({parts},1)}}}}.{{{{wildcard(1)}}}}"
        transform = SubjectTransform(src="floor.in.*", dest=dest)
    in_extra: dict[str, Any] = {}
    cons_extra: dict[str, Any] = {}
    if "incfg" in feats:
        in_extra = {"discard": DiscardPolicy.NEW, "max_age": 7 * DAY, "max_msg_size": 2**20 + 4096}
        cons_extra = {"ack_wait": 30.0, "backoff": ORE_BACKOFF, "max_deliver": 10}
    await js.add_stream(
        StreamConfig(
            name="FLOOR",
            subjects=["floor.in.*"],
            storage=StorageType.FILE,
            duplicate_window=120,
            subject_transform=transform,
            **in_extra,
        )
    )
    consumers = []
    for p in range(parts or 1):
        name = f"w{p}" if parts else "w"
        await js.add_consumer(
            "FLOOR",
            ConsumerConfig(
                durable_name=name,
                ack_policy=AckPolicy.EXPLICIT,
                max_ack_pending=1000,
                filter_subject=f"floor.inp.{p}.*" if parts else None,
                mem_storage=True if "mem" in feats else None,
                **cons_extra,
            ),
        )
        consumers.append(name)
    out_subject = "floor.ev." if "repub" in feats else "floor.out."
    out_extra: dict[str, Any] = {}
    if "evcfg" in feats:
        out_extra = {
            "discard": DiscardPolicy.OLD,
            "max_age": 7 * DAY,
            "max_bytes": 1024**3,
            "allow_direct": True,
        }
    republish = None
    if "repub" in feats:
        republish = RePublish(src="floor.ev.*", dest="floor.out.{{wildcard(1)}}")
    await js.add_stream(
        StreamConfig(
            name="FLOOROUT",
            subjects=[out_subject + "*"],
            storage=StorageType.FILE,
            duplicate_window=30 if "evcfg" in feats else 120,
            republish=republish,
            **out_extra,
        )
    )
    request = json.dumps(
        {"batch": PULL_BATCH, "expires": 30_000_000_000, "idle_heartbeat": 5_000_000_000}
    ).encode()
    db = floor_schema(args.db)
    loop = asyncio.get_running_loop()
    acks_inbox = nc.new_inbox() + "."
    publish = nc.publish
    tips: dict[str, str] = {}
    pending_saves: list[FloorSave] = []
    tasks: set[asyncio.Task[None]] = set()
    waiting_acks: dict[str, tuple[str, str]] = {}  # token -> (ingress ack subject, thread)
    last_seq: dict[str, int] = {}
    queued: dict[str, deque[tuple[str, bytes]]] = {}  # fence: a thread's batches waiting
    counter = 0
    pulls = 0
    hdr = "hdr" in feats
    live_headers = {"Ore-Kind": "batch", "Ore-Schema": "2"} if hdr else None
    submitted = b'{"kind":"lifecycle","phase":"submitted","context":{"provenance":"bench"}}'
    streaming = b'{"kind":"lifecycle","phase":"streaming","context":{"provenance":"bench"}}'
    done = b'{"kind":"lifecycle","phase":"done","context":{"provenance":"bench"}}'
    context = b',"context":{"provenance":"bench"}}'

    def spawn(coro: Any) -> None:
        task = loop.create_task(coro)
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    def commit() -> None:
        batch = pending_saves[:]
        pending_saves.clear()
        floor_commit(db, batch)
        for save in batch:
            if "fence" in feats:
                waiting = queued.get(save.thread_id)
                if waiting is not None:  # the thread's previous batch is not acked yet
                    waiting.append((save.reply, save.stored))
                    continue
                queued[save.thread_id] = deque()
            spawn(store(save.thread_id, save.reply, save.stored))

    async def store(thread_id: str, reply: str, stored: bytes) -> None:
        nonlocal counter
        counter += 1
        token = str(counter)
        waiting_acks[token] = (reply, thread_id)
        headers: dict[str, str] | None = None
        if hdr or "msgid" in feats or "fence" in feats:
            headers = {}
            if hdr:
                headers.update(live_headers or {})
            if "msgid" in feats:
                headers["Nats-Msg-Id"] = f"{args.idp}-{token}"
            if "fence" in feats:
                headers["Nats-Expected-Last-Subject-Sequence"] = str(last_seq.get(thread_id, 0))
        await publish(out_subject + thread_id, stored, reply=acks_inbox + token, headers=headers)

    async def on_ack(msg: Msg) -> None:
        reply, thread_id = waiting_acks.pop(msg.subject[len(acks_inbox) :], ("", ""))
        if not reply:
            return
        if b'"error"' in msg.data:
            print("store refused:", msg.data, file=sys.stderr)
            return
        if "fence" in feats:
            last_seq[thread_id] = orjson.loads(msg.data)["seq"]
            waiting = queued[thread_id]
            if waiting:
                next_reply, stored = waiting.popleft()
                spawn(store(thread_id, next_reply, stored))
            else:
                del queued[thread_id]
        await publish(reply, b"+ACK")

    async def handle(msg: Msg) -> None:
        if slow:
            end = time.perf_counter() + slow
            while time.perf_counter() < end:
                pass
        thread_id = msg.subject.rsplit(".", 1)[1]
        message = orjson.loads(msg.data)
        content = message["content"]
        user_id, bot_id = os.urandom(8).hex(), os.urandom(8).hex()
        user_json = floor_turn(user_id, tips.get(thread_id, ""), "user", content, message["id"])
        bot_json = floor_turn(bot_id, user_id, "assistant", content, "")
        tips[thread_id] = bot_id
        delta = b'{"kind":"text_delta","content":' + orjson.dumps(content) + context
        live = b"[" + submitted + b"," + streaming + b"," + delta + b"]"
        await publish("floor.live." + thread_id, live, headers=live_headers)
        text = b'{"kind":"text","content":' + orjson.dumps(content) + context
        stored = b"".join(
            (
                b'[{"kind":"turn_complete","turn":',
                user_json,
                context,
                b",",
                text,
                b',{"kind":"turn_complete","turn":',
                bot_json,
                context,
                b",",
                done,
                b"]",
            )
        )
        if not pending_saves:
            loop.call_soon(commit)
        pending_saves.append(
            FloorSave(
                thread_id,
                user_id,
                user_json.decode(),
                bot_id,
                bot_json.decode(),
                msg.reply,
                stored,
                floor_stamp(),
            )
        )

    async def start_pulling(consumer: str) -> None:
        next_subject = f"$JS.API.CONSUMER.MSG.NEXT.FLOOR.{consumer}"
        inbox = nc.new_inbox()
        outstanding = 0

        async def pull() -> None:
            nonlocal outstanding, pulls
            outstanding += PULL_BATCH
            pulls += 1
            await publish(next_subject, request, reply=inbox)

        async def on_message(msg: Msg) -> None:
            nonlocal outstanding
            if not msg.data and msg.headers and "Status" in msg.headers:
                if msg.headers["Status"] != "100":
                    pending = int(msg.headers.get("Nats-Pending-Messages", 0))
                    outstanding = max(0, outstanding - pending)
                    if outstanding <= PULL_BATCH // 2:
                        await pull()
                return
            outstanding -= 1
            if outstanding <= PULL_BATCH // 2:
                await pull()
            await handle(msg)

        await nc.subscribe(inbox, cb=on_message)
        await pull()

    await nc.subscribe(acks_inbox + "*", cb=on_ack)
    for consumer in consumers:
        await start_pulling(consumer)
    if "kv" in feats:
        await start_leases(js, spawn)
    await nc.flush()
    say({"ready": True})
    await loop.run_in_executor(None, sys.stdin.readline)
    print(f"pull requests: {pulls}", file=sys.stderr)
    await nc.close()


async def start_leases(js: Any, spawn: Any) -> None:
    """ore's lease traffic: 32 leases and a registration renewed each second, watched."""
    kv = await js.create_key_value(bucket="FLOORKV", ttl=4.0, history=1)
    keys = [f"lease.{p}" for p in range(32)] + ["worker.me"]
    revisions = {key: await kv.put(key, b"vm-floor-worker") for key in keys}
    watcher = await kv.watchall()

    async def watch() -> None:
        while True:
            try:
                await watcher.updates(timeout=10)
            except Exception:
                pass

    async def renew() -> None:
        while True:
            await asyncio.sleep(1.0)
            for key in keys:
                try:
                    if key.startswith("worker"):
                        revisions[key] = await kv.put(key, b"vm-floor-worker")
                    else:
                        revisions[key] = await kv.update(
                            key, b"vm-floor-worker", last=revisions[key]
                        )
                except Exception as exc:
                    print("lease renewal failed:", repr(exc), file=sys.stderr)

    spawn(watch())
    spawn(renew())


# --- client ---------------------------------------------------------------------------


async def floor_client(url: str, variant: str) -> Any:
    """hotpath.py's floor client; with `hdr`, ore's ingress JSON and headers."""
    import nats
    from nats.aio.msg import Msg

    hdr = "hdr" in features(variant)
    nc = await nats.connect(url, name="floor-client")
    js = nc.jetstream()
    waiters = Waiters()

    async def on_live(msg: Msg) -> None:
        pass

    async def on_stored(msg: Msg) -> None:
        waiters.resolve(msg.subject[10:])  # "floor.out."

    await nc.subscribe("floor.live.*", cb=on_live)
    await nc.subscribe("floor.out.*", cb=on_stored)
    await nc.flush()

    async def send(thread_id: str, index: int) -> None:
        message_id = f"{thread_id}-{index}"
        body: dict[str, Any] = {"kind": "user_message", "id": message_id, "content": hotpath.TEXT}
        headers = {"Nats-Msg-Id": message_id}
        if hdr:
            body["context"] = {"provenance": "bench"}
            headers = {
                "Nats-Msg-Id": f"{thread_id}:{message_id}",
                "Ore-Kind": "user_message",
                "Ore-Schema": "2",
            }
        await js.publish(f"floor.in.{thread_id}", json.dumps(body).encode(), headers=headers)

    return send, waiters, nc.close


async def client_main(args: argparse.Namespace) -> None:
    if args.variant.startswith("ore"):
        send, waiters, close = await hotpath.ore_client(args.url)
    else:
        send, waiters, close = await floor_client(args.url, args.variant)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    threads = [f"{args.run}t{n}" for n in range(args.threads)]
    warmup = hotpath.WARMUP_PER_THREAD
    await asyncio.gather(*(converse(send, waiters, t, 0, warmup) for t in threads))
    say({"ready": True})
    while command := (await reader.readline()).decode().strip():
        if command == "throughput":
            started = time.perf_counter()
            await asyncio.gather(
                *(converse(send, waiters, t, warmup, args.per_thread) for t in threads)
            )
            seconds = time.perf_counter() - started
            say({"turns": args.threads * args.per_thread, "seconds": seconds})
        elif command == "idle":
            await asyncio.sleep(args.idle)
            say({"turns": 1, "seconds": args.idle})
        elif command == "quit":
            break
    await close()


# --- orchestrator ---------------------------------------------------------------------

COUNTERS = ("in_msgs", "out_msgs", "in_bytes", "out_bytes")


def server_threads_counter(pid: int, field: str) -> int:
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/status") as status:
                for line in status:
                    if line.startswith(field):
                        total += int(line.split()[1])
        except OSError:
            pass
    return total


class Probe:
    """CPU per process and the server's counters, at one moment."""

    def __init__(self, monitor: str, pids: dict[str, int]) -> None:
        self.cpu = {name: cpu_ns(pid) for name, pid in pids.items()}
        varz = get_json(monitor + "/varz")
        self.varz = {key: int(varz[key]) for key in COUNTERS}
        self.conns: dict[str, list[int]] = {}
        for conn in get_json(monitor + "/connz?limit=1000").get("connections") or []:
            counts = self.conns.setdefault(conn.get("name") or f"cid{conn['cid']}", [0] * 4)
            for index, key in enumerate(COUNTERS):
                counts[index] += int(conn.get(key, 0))
        with open(f"/proc/{pids['nats']}/io") as io:
            fields = dict(line.split(": ") for line in io.read().splitlines())
        self.syscalls = (int(fields["syscr"]), int(fields["syscw"]))
        self.switches = server_threads_counter(pids["nats"], "voluntary_ctxt") + (
            server_threads_counter(pids["nats"], "nonvoluntary_ctxt")
        )


def per_turn(before: Probe, after: Probe, turns: int) -> dict[str, Any]:
    figures: dict[str, Any] = {
        f"cpu_{name}": (after.cpu[name] - before.cpu[name]) / turns / 1e3 for name in after.cpu
    }
    for key in COUNTERS:
        figures[key] = (after.varz[key] - before.varz[key]) / turns
    figures["syscr"] = (after.syscalls[0] - before.syscalls[0]) / turns
    figures["syscw"] = (after.syscalls[1] - before.syscalls[1]) / turns
    figures["switches"] = (after.switches - before.switches) / turns
    figures["conns"] = {
        name: [
            round((a - b) / turns, 4)
            for a, b in zip(counts, before.conns.get(name, [0] * 4), strict=True)
        ]
        for name, counts in after.conns.items()
    }
    return figures


def run_side(
    variant: str, server: Any, tmp: Path, args: argparse.Namespace, run: str
) -> dict[str, Any]:
    me = [sys.executable, str(HERE), "--url", server.url, "--variant", variant]
    if variant.startswith("ore"):
        env = {
            **os.environ,
            "ORE_LOAD_PLUGINS": "",
            "ORE_STORE__NAME": "sqlite",
            "ORE_CONFIG": str(tmp / "ore.toml"),
            "ORE_STORE__PATH": str(tmp / f"ore-{run}.db"),
        }
        if variant[3:]:
            env["ORE_NATS__PARTITIONS"] = variant[3:]
        (tmp / "ore.toml").write_text("")
        log = (tmp / f"ore-serve-{run}.log").open("wb")
        ore = str(Path(sys.executable).with_name("ore"))
        worker = Child([ore, "serve", "--nats", server.url], env=env, log=log)
        hotpath.wait_core_ready(server.url, worker)
    else:
        worker = Child(
            [*me, "--role", "worker", "--idp", run, "--db", str(tmp / f"floor-{run}.db")]
        )
        worker.answer()
    client = Child(
        [
            *me,
            *("--role", "client", "--run", run, "--threads", str(args.threads)),
            *("--per-thread", str(args.per_thread), "--idle", str(args.idle)),
        ]
    )
    try:
        client.answer()  # warmed up
        pids = {"worker": worker.pid, "nats": server.pid, "client": client.pid}
        before = Probe(server.monitor_url, pids)
        client.send("throughput")
        result = client.answer()
        after = Probe(server.monitor_url, pids)
        figures = per_turn(before, after, result["turns"])
        figures["rate"] = result["turns"] / result["seconds"]
        if args.idle:
            before = Probe(server.monitor_url, pids)
            client.send("idle")
            client.answer()
            after = Probe(server.monitor_url, pids)
            figures["idle_nats_us_per_s"] = per_turn(before, after, 1)["cpu_nats"] / args.idle
        client.send("quit")
        client.process.wait(30)
    finally:
        client.stop()
        if not variant.startswith("ore"):
            worker.send("quit")
            try:
                worker.process.wait(10)
            except Exception:
                pass
        worker.stop()
    return figures


def main(args: argparse.Namespace) -> None:
    from ore_core.bus.server.embedded import EmbeddedNatsServer

    variants = args.variants.split(",")
    results: dict[str, list[dict[str, Any]]] = {variant: [] for variant in variants}
    root = args.store_root or None
    with tempfile.TemporaryDirectory(prefix="ore-natscost-", dir=root) as name:
        tmp = Path(name)
        for index in range(args.rounds):
            for number, variant in enumerate(variants if index % 2 == 0 else variants[::-1]):
                with EmbeddedNatsServer(tmp / f"nats-{index}-{number}") as server:
                    figures = run_side(variant, server, tmp, args, f"r{index}v{number}")
                results[variant].append(figures)
                line = {"round": index, "variant": variant, **figures}
                print(json.dumps(line), file=sys.stderr, flush=True)
    print(
        f"load {os.getloadavg()[0]:.1f}; {args.threads} threads x {args.per_thread} turns; "
        f"{args.rounds} round(s); medians (range)"
    )
    print()
    print(
        "| variant | nats-server µs/turn | worker µs | client µs | msgs in/out | bytes in/out"
        " | server read/write syscalls | server ctx switches | turns/s | idle server µs/s |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for variant, rounds in results.items():

        def med(key: str, rounds: list[dict[str, Any]] = rounds) -> float:
            return statistics.median(r.get(key, 0.0) for r in rounds)

        server = [r["cpu_nats"] for r in rounds]
        print(
            f"| {variant} | {med('cpu_nats'):.1f} ({min(server):.1f}-{max(server):.1f})"
            f" | {med('cpu_worker'):.1f} | {med('cpu_client'):.1f}"
            f" | {med('in_msgs'):.2f}/{med('out_msgs'):.2f}"
            f" | {med('in_bytes'):.0f}/{med('out_bytes'):.0f}"
            f" | {med('syscr'):.2f}/{med('syscw'):.2f} | {med('switches'):.2f}"
            f" | {med('rate'):,.0f} | {med('idle_nats_us_per_s'):,.0f} |"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--variants", default="base,ore")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--threads", type=int, default=100)
    parser.add_argument("--per-thread", type=int, default=60)
    parser.add_argument("--idle", type=float, default=0.0, help="seconds of idle measurement")
    parser.add_argument("--store-root", default="", help="where the servers' data go")
    parser.add_argument("--role", choices=["worker", "client"])
    parser.add_argument("--variant", default="base", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--run", default="", help=argparse.SUPPRESS)
    parser.add_argument("--idp", default="", help=argparse.SUPPRESS)
    parser.add_argument("--db", help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.role == "worker":
        asyncio.run(worker_main(arguments))
    elif arguments.role == "client":
        asyncio.run(client_main(arguments))
    else:
        main(arguments)
