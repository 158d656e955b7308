"""The hot path: what one turn costs in `ore serve` against the fastest raw nats-py loop.

Run: `python bench/hotpath.py [--threads 100] [--per-thread 30] [--latency 1000] [--rounds 1]
[--sync always] [--before PATH/TO/OTHER/ore] [--floor] [--profile DIR] [--instructions] [--syscalls]
[--libraries]`.

One nats-server (file storage, monitoring port) serves both sides; each side runs as
real processes, measured from outside:

  raw   a nats-py worker process: JetStream ingress (`raw.in.T`, stream RAW) through a
        streaming pull (long-lived `CONSUMER.MSG.NEXT` requests re-armed at half credit,
        the same shape as ore's `Puller`), one core-NATS reply on `raw.out.T`, and a
        pipelined ack (published, never awaited). Its client publishes with
        `Nats-Msg-Id`, awaits the publish ack, and waits for the reply.
  ore   `ore serve --nats URL` exactly as an operator starts it (built-in plugins,
        default SQLite store, echo processor; third-party plugins not loaded), and a
        conduit built on `ConduitClient`: `send()` plus one `events()` feed for all
        threads, waiting for `lifecycle: done`.
  floor (`--floor`) ore's durable work per turn without the framework, in a nats-py
        worker process: the raw loop's hops plus the JSON message parsed, two turns made
        and written to SQLite (WAL, synchronous=NORMAL, commits grouped per loop
        iteration), ore's seven events encoded (three live in one core-NATS message,
        four in one JetStream message whose publish ack is awaited before the ingress
        ack), the same NATS messages per turn as ore. What ore costs above the floor is
        the framework's (plugins, events as objects, ledger, ownership), not the work's.

Per side, a client process warms up (every thread gets its first turns), then runs
  throughput   `--threads` threads, each sending its next message when the previous one
               is answered, `--per-thread` messages each;
  latency      `--latency` sequential round trips on one thread (p50).
Around the throughput phase the orchestrator reads, from outside the processes:
  CPU           /proc/<pid>/task/*/schedstat (ns on CPU) of the worker, nats-server and
                client processes (threads that exit during a phase are not counted;
                none of these processes start threads per message);
  NATS messages nats-server `/varz` in_msgs/out_msgs deltas;
  JetStream     the sum of every stream's last_seq (`/jsz`), i.e. messages stored.
Everything is divided by the turns of the phase. Ratios are ore / raw in the same
run: absolute rates on a shared machine swing several-fold, ratios much less.

`--bytecodes TOP` runs `ore serve` under bench/bytecodes.py the same way (two sizes,
differenced) and prints the Python bytecodes a turn executes, per file and per function:
where the interpreter's work goes, exactly and repeatably; then the raw worker's total
(and the floor's, with `--floor`) counted the same way.

`--instructions` counts instead what CPU time only estimates: every side's worker runs
under valgrind's cachegrind (user-space instructions of all its threads), twice, with
`--per-thread` and twice that many turns; the difference divided by the extra turns is
its instructions per turn, start-up and warm-up cancelling out. Counts repeat within
about 1 % whatever else the machine runs, where CPU per turn moved by 25 % on a busy
machine, so a change is measured in one run. They leave out the kernel (socket calls,
thread wake-ups), about a fifth of the worker's CPU. Under valgrind a process runs some
50 times slower: `ore serve` gets a 60 s partition lease (at the default 4 s its leases
lapse and it measures recovery work instead of turns).

`--syscalls` attaches `strace -f -c` to every side's worker (all its threads) for the
throughput phase and prints its system calls per turn by name: what the kernel CPU and
context switches in the table are made of. Under strace a worker runs several times
slower (its batches get smaller), so those rounds' other figures are not figures.

`--libraries` samples every side's worker with `perf record` (all its threads, ~1,000
samples a second) for the throughput phase and splits its CPU per turn by where the
samples landed: the Python interpreter (libpython: bytecodes, objects, dicts, calls),
the kernel, libc (malloc, memcpy), SQLite, pydantic-core, orjson, the rest; the main
thread apart from the others (the store's worker and checkpoint threads). Says whether
a turn's cost is Python or the C it calls, which bytecode counts cannot.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import orjson

TEXT = "hello"
WARMUP_PER_THREAD = 3
LATENCY_WARMUP = 100
RAW_STREAM = "RAW"
RAW_CONSUMER = "w"
PULL_BATCH = 256

Send = Callable[[str, int], Awaitable[None]]


# --- client process -----------------------------------------------------------------------


class Waiters:
    """One future per thread, resolved by the reply (raw) or `lifecycle: done` (ore)."""

    def __init__(self) -> None:
        self.futures: dict[str, asyncio.Future[None]] = {}

    def expect(self, thread_id: str) -> asyncio.Future[None]:
        future = asyncio.get_running_loop().create_future()
        self.futures[thread_id] = future
        return future

    def resolve(self, thread_id: str) -> None:
        future = self.futures.pop(thread_id, None)
        if future is not None and not future.done():
            future.set_result(None)


async def converse(send: Send, waiters: Waiters, thread_id: str, first: int, count: int) -> None:
    for index in range(first, first + count):
        done = waiters.expect(thread_id)
        await send(thread_id, index)
        await asyncio.wait_for(done, 30)


async def raw_client(url: str) -> tuple[Send, Waiters, Callable[[], Awaitable[None]]]:
    import nats
    from nats.aio.msg import Msg

    nc = await nats.connect(url)
    js = nc.jetstream()
    waiters = Waiters()

    async def on_reply(msg: Msg) -> None:
        waiters.resolve(msg.subject[8:])  # "raw.out."

    await nc.subscribe("raw.out.*", cb=on_reply)
    await nc.flush()

    async def send(thread_id: str, index: int) -> None:
        await js.publish(
            f"raw.in.{thread_id}", TEXT.encode(), headers={"Nats-Msg-Id": f"{thread_id}-{index}"}
        )

    return send, waiters, nc.close


async def floor_client(url: str) -> tuple[Send, Waiters, Callable[[], Awaitable[None]]]:
    """The raw client's shape for the floor worker: a JSON message in, the live batch
    and the stored batch (ending with `done`) out."""
    import nats
    from nats.aio.msg import Msg

    nc = await nats.connect(url)
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
        body = json.dumps({"kind": "user_message", "id": message_id, "content": TEXT})
        await js.publish(
            f"floor.in.{thread_id}", body.encode(), headers={"Nats-Msg-Id": message_id}
        )

    return send, waiters, nc.close


async def ore_client(url: str) -> tuple[Send, Waiters, Callable[[], Awaitable[None]]]:
    from ore_core import ConduitClient

    client = await ConduitClient.connect(url, name="bench")
    waiters = Waiters()
    feed = await client.events().start()

    async def read() -> None:
        async for delivery in feed:
            if delivery.kind == "lifecycle" and getattr(delivery.event, "phase", "") == "done":
                waiters.resolve(delivery.thread_id)

    reader = asyncio.get_running_loop().create_task(read())

    async def send(thread_id: str, index: int) -> None:
        await client.send(thread_id, TEXT, id=f"{thread_id}-{index}")

    async def close() -> None:
        await feed.close()
        reader.cancel()
        await asyncio.gather(reader, return_exceptions=True)
        await client.close()

    return send, waiters, close


async def client_main(args: argparse.Namespace) -> None:
    """Phases driven by the orchestrator over stdin/stdout, one JSON line per answer."""
    make = {"raw-client": raw_client, "floor-client": floor_client}.get(args.role, ore_client)
    send, waiters, close = await make(args.url)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    run = args.run
    threads = [f"{run}t{n}" for n in range(args.threads)]
    lat_thread = f"{run}lat"

    await asyncio.gather(*(converse(send, waiters, t, 0, WARMUP_PER_THREAD) for t in threads))
    await converse(send, waiters, lat_thread, 0, LATENCY_WARMUP)
    say({"ready": True})
    while command := (await reader.readline()).decode().strip():
        if command == "throughput":
            started = time.perf_counter()
            await asyncio.gather(
                *(converse(send, waiters, t, WARMUP_PER_THREAD, args.per_thread) for t in threads)
            )
            seconds = time.perf_counter() - started
            say({"turns": args.threads * args.per_thread, "seconds": seconds})
        elif command == "latency":
            samples = []
            for index in range(args.latency):
                started = time.perf_counter()
                await converse(send, waiters, lat_thread, LATENCY_WARMUP + index, 1)
                samples.append(time.perf_counter() - started)
            say({"turns": args.latency, "p50": statistics.median(samples)})
        elif command == "quit":
            break
    await close()


def say(value: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(value) + "\n")
    sys.stdout.flush()


# --- raw worker process -------------------------------------------------------------------


async def pull_consumer(nc: Any, stream: str, subject: str) -> tuple[str, bytes]:
    """Make `stream` (file storage) on `subject` and its durable pull consumer; the
    subject and body of a long-lived pull request (`CONSUMER.MSG.NEXT`).

    Each worker keeps its own credit accounting inline: it is the hot path of the baseline.
    """
    from nats.js.api import AckPolicy, ConsumerConfig, StorageType, StreamConfig

    js = nc.jetstream()
    await js.add_stream(
        StreamConfig(
            name=stream, subjects=[subject], storage=StorageType.FILE, duplicate_window=120
        )
    )
    await js.add_consumer(
        stream,
        ConsumerConfig(
            durable_name=RAW_CONSUMER, ack_policy=AckPolicy.EXPLICIT, max_ack_pending=1000
        ),
    )
    request = json.dumps(
        {"batch": PULL_BATCH, "expires": 30_000_000_000, "idle_heartbeat": 5_000_000_000}
    ).encode()
    return f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{RAW_CONSUMER}", request


async def raw_worker_main(args: argparse.Namespace) -> None:
    """The fastest honest raw loop: streaming pull, core-NATS reply, pipelined ack."""
    import nats
    from nats.aio.msg import Msg

    nc = await nats.connect(args.url)
    next_subject, request = await pull_consumer(nc, RAW_STREAM, "raw.in.*")
    inbox = nc.new_inbox()
    outstanding = 0
    publish = nc.publish

    async def pull() -> None:
        nonlocal outstanding
        outstanding += PULL_BATCH
        await publish(next_subject, request, reply=inbox)

    async def on_message(msg: Msg) -> None:
        nonlocal outstanding
        if not msg.data and msg.headers and "Status" in msg.headers:
            if msg.headers["Status"] != "100":  # a request ended: its credit is gone
                outstanding = max(0, outstanding - int(msg.headers.get("Nats-Pending-Messages", 0)))
                if outstanding <= PULL_BATCH // 2:
                    await pull()
            return
        outstanding -= 1
        if outstanding <= PULL_BATCH // 2:
            await pull()
        await publish("raw.out." + msg.subject[7:], msg.data)  # "raw.in."
        await publish(msg.reply, b"+ACK")

    await nc.subscribe(inbox, cb=on_message)
    await pull()
    await nc.flush()
    say({"ready": True})
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    await nc.close()


# --- floor worker process -----------------------------------------------------------------

FLOOR_STREAM = "FLOOR"
FLOOR_OUT_STREAM = "FLOOROUT"


@dataclass(frozen=True, slots=True)
class FloorSave:
    """One turn's rows waiting for the loop iteration's commit, and what follows it."""

    thread_id: str
    user_id: str
    user_json: str
    bot_id: str
    bot_json: str
    reply: str  # the ingress message's ack subject
    stored: bytes  # the stored batch, published once committed
    when: str


def floor_schema(path: str) -> Any:
    import sqlite3

    db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.execute(
        "CREATE TABLE IF NOT EXISTS threads (id TEXT PRIMARY KEY, current_tip TEXT NOT NULL,"
        " updated_at TEXT NOT NULL)"
    )
    db.execute(
        "CREATE TABLE IF NOT EXISTS turns (seq INTEGER PRIMARY KEY, thread_id TEXT NOT NULL,"
        " turn_id TEXT NOT NULL, json TEXT NOT NULL, UNIQUE (thread_id, turn_id))"
    )
    return db


def floor_stamp() -> str:
    """A turn's timestamp as ore writes it (RFC 3339, UTC, `Z`)."""
    return dt.datetime.now(dt.UTC).isoformat().replace("+00:00", "Z")


def floor_turn(turn_id: str, parent: str, role: str, text: str, event_id: str) -> bytes:
    """A text turn's JSON as ore stores it (the floor's one encoding of it)."""
    value: dict[str, Any] = {"id": turn_id}
    if parent:
        value["parent_id"] = parent
    value["role"] = role
    value["artifacts"] = [{"kind": "text", "data": {"kind": "text", "content": text}}]
    value["timestamp"] = floor_stamp()
    if event_id:
        value["metadata"] = {"event_id": event_id}
    return orjson.dumps(value)


def floor_commit(db: Any, batch: list[FloorSave]) -> None:
    """The loop iteration's saves in one transaction: both turns of each, and its tip."""
    db.execute("BEGIN IMMEDIATE")
    for save in batch:
        db.executemany(
            "INSERT INTO turns (thread_id, turn_id, json) VALUES (?, ?, ?)",
            (
                (save.thread_id, save.user_id, save.user_json),
                (save.thread_id, save.bot_id, save.bot_json),
            ),
        )
        db.execute(
            "INSERT INTO threads (id, current_tip, updated_at) VALUES (?, ?, ?) ON CONFLICT"
            " (id) DO UPDATE SET current_tip = excluded.current_tip,"
            " updated_at = excluded.updated_at",
            (save.thread_id, save.bot_id, save.when),
        )
    db.execute("COMMIT")


async def floor_worker_main(args: argparse.Namespace) -> None:
    """The floor: ore's durable work per turn in plain nats-py, SQLite and orjson, no
    framework. Per message: parse its JSON, make the user and the assistant turn (ids,
    timestamps, parent), encode ore's seven events (submitted, streaming and the delta
    live on core NATS in one message; both turn_completes, the text and done stored in
    one JetStream message), insert both turns and move the thread's tip in SQLite
    (commits grouped per loop iteration, on the loop: the cheapest honest commit), then
    publish the stored batch (publish ack awaited through one inbox, pipelined) and ack
    the ingress message once the stored batch is acknowledged. What ore costs above
    this is the framework's (plugins, events as objects, ledger, ownership), not the
    durable work's."""

    import nats
    import orjson
    from nats.aio.msg import Msg
    from nats.js.api import StorageType, StreamConfig

    nc = await nats.connect(args.url)
    next_subject, request = await pull_consumer(nc, FLOOR_STREAM, "floor.in.*")
    await nc.jetstream().add_stream(
        StreamConfig(
            name=FLOOR_OUT_STREAM,
            subjects=["floor.out.*"],
            storage=StorageType.FILE,
            duplicate_window=120,
        )
    )
    db = floor_schema(args.db)
    loop = asyncio.get_running_loop()
    inbox = nc.new_inbox()
    acks_inbox = nc.new_inbox() + "."
    outstanding = 0
    publish = nc.publish
    tips: dict[str, str] = {}
    pending_saves: list[FloorSave] = []
    storing: set[asyncio.Task[None]] = set()
    waiting_acks: dict[str, str] = {}  # publish-ack token -> the ingress message's reply
    counter = 0
    submitted = b'{"kind":"lifecycle","phase":"submitted","context":{"provenance":"bench"}}'
    streaming = b'{"kind":"lifecycle","phase":"streaming","context":{"provenance":"bench"}}'
    done = b'{"kind":"lifecycle","phase":"done","context":{"provenance":"bench"}}'
    context = b',"context":{"provenance":"bench"}}'

    def commit() -> None:
        batch = pending_saves[:]
        pending_saves.clear()
        floor_commit(db, batch)
        for save in batch:
            task = loop.create_task(store(save.thread_id, save.reply, save.stored))
            storing.add(task)
            task.add_done_callback(storing.discard)

    async def store(thread_id: str, reply: str, stored: bytes) -> None:
        nonlocal counter
        counter += 1
        token = str(counter)
        waiting_acks[token] = reply
        await publish("floor.out." + thread_id, stored, reply=acks_inbox + token)

    async def on_ack(msg: Msg) -> None:
        reply = waiting_acks.pop(msg.subject[len(acks_inbox) :], None)
        if reply is not None and b'"error"' not in msg.data:
            await publish(reply, b"+ACK")

    async def pull() -> None:
        nonlocal outstanding
        outstanding += PULL_BATCH
        await publish(next_subject, request, reply=inbox)

    async def on_message(msg: Msg) -> None:
        nonlocal outstanding
        if not msg.data and msg.headers and "Status" in msg.headers:
            if msg.headers["Status"] != "100":
                outstanding = max(0, outstanding - int(msg.headers.get("Nats-Pending-Messages", 0)))
                if outstanding <= PULL_BATCH // 2:
                    await pull()
            return
        outstanding -= 1
        if outstanding <= PULL_BATCH // 2:
            await pull()
        thread_id = msg.subject[9:]  # "floor.in."
        message = orjson.loads(msg.data)
        content = message["content"]
        user_id, bot_id = os.urandom(8).hex(), os.urandom(8).hex()
        user_json = floor_turn(user_id, tips.get(thread_id, ""), "user", content, message["id"])
        bot_json = floor_turn(bot_id, user_id, "assistant", content, "")
        tips[thread_id] = bot_id
        delta = b'{"kind":"text_delta","content":' + orjson.dumps(content) + context
        live = b"[" + submitted + b"," + streaming + b"," + delta + b"]"
        await publish("floor.live." + thread_id, live)
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

    await nc.subscribe(acks_inbox + "*", cb=on_ack)
    await nc.subscribe(inbox, cb=on_message)
    await pull()
    await nc.flush()
    say({"ready": True})
    await loop.run_in_executor(None, sys.stdin.readline)
    await nc.close()


# --- orchestrator -------------------------------------------------------------------------


def cpu_ns(pid: int, *, main_only: bool = False) -> int:
    """Nanoseconds on CPU of every live thread of `pid` (or of its main thread only)."""
    total = 0
    for task in [str(pid)] if main_only else os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as file:
                total += int(file.read().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            pass
    return total


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as answer:
        return json.load(answer)


def switches_and_kernel(pid: int) -> tuple[Counter[str], float]:
    """Context switches (voluntary and not) of every thread of `pid`, by thread name
    (the main thread as `main`; the preempted ones, i.e. not voluntary, also under
    " preempted"), and its kernel CPU seconds: what thread hand-overs and socket calls
    cost beside instructions, and which thread they happen on. Preemptions grow with
    the CPU a process uses on a loaded machine; the voluntary ones are its own waits."""
    switches: Counter[str] = Counter()
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            name = "main" if task.name == str(pid) else (task / "comm").read_text().strip()
            for line in (task / "status").read_text().splitlines():
                if line.startswith("voluntary_ctxt_switches"):
                    switches[name] += int(line.split()[1])
                elif line.startswith("nonvoluntary_ctxt_switches"):  # preempted
                    switches[name] += int(line.split()[1])
                    switches[" preempted"] += int(line.split()[1])
        except OSError:
            continue  # a thread that ended meanwhile
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    kernel = int(fields[12]) / os.sysconf("SC_CLK_TCK")  # stime (field 15 of stat)
    return switches, kernel


class Probe:
    """A snapshot of CPU per process and of the server's message counters."""

    def __init__(self, monitor: str, pids: dict[str, int]) -> None:
        self.cpu = {name: cpu_ns(pid) for name, pid in pids.items()}
        self.worker_main = cpu_ns(pids["worker"], main_only=True)
        self.worker_switches, self.worker_kernel = switches_and_kernel(pids["worker"])
        varz = get_json(monitor + "/varz")
        self.msgs_in, self.msgs_out = int(varz["in_msgs"]), int(varz["out_msgs"])
        jsz = get_json(monitor + "/jsz?accounts=true&streams=true")
        self.stored = sum(
            int(stream["state"]["last_seq"])
            for account in jsz.get("account_details") or []
            for stream in account.get("stream_detail") or []
        )


def per_turn(before: Probe, after: Probe, turns: int) -> dict[str, float]:
    figures = {
        f"cpu_{name}": (after.cpu[name] - before.cpu[name]) / turns / 1e3 for name in after.cpu
    }
    figures["cpu_total"] = sum(v for k, v in figures.items() if k.startswith("cpu_"))
    figures["cpu_worker_main"] = (after.worker_main - before.worker_main) / turns / 1e3
    switched = after.worker_switches.copy()
    switched.subtract(before.worker_switches)
    preempted = switched.pop(" preempted", 0)
    figures["switches_worker"] = sum(switched.values()) / turns
    figures["switches_worker_main"] = switched["main"] / turns
    figures["switches_worker_preempted"] = preempted / turns
    for name, count in switched.items():
        if name != "main" and count > 0:
            figures[f"switches thread {name}"] = count / turns
    figures["kernel_worker"] = (after.worker_kernel - before.worker_kernel) / turns * 1e6
    figures["msgs_in"] = (after.msgs_in - before.msgs_in) / turns
    figures["msgs_out"] = (after.msgs_out - before.msgs_out) / turns
    figures["stored"] = (after.stored - before.stored) / turns
    return figures


class Child:
    """A process spoken to in JSON lines (stdin commands, stdout answers)."""

    def __init__(
        self, argv: list[str], env: dict[str, str] | None = None, log: IO[bytes] | None = None
    ) -> None:
        self.process = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, env=env, text=True
        )

    @property
    def pid(self) -> int:
        return self.process.pid

    def send(self, command: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()

    def answer(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            argv = self.process.args
            name = argv[:3] if isinstance(argv, list) else argv
            raise RuntimeError(f"{name!r} ended (code {self.process.wait()})")
        result: dict[str, Any] = json.loads(line)
        return result

    def stop(self, patience: float = 30) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(patience)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def wait_core_ready(url: str, core: Child, patience: int = 300) -> None:
    """Until the core answers its control API (`CoreService.start` registers it last);
    `patience` tries, each up to 0.6 s."""

    async def ask() -> None:
        import nats

        nc = await nats.connect(url)
        try:
            for _ in range(patience):
                if core.process.poll() is not None:
                    raise RuntimeError(f"ore serve exited with {core.process.returncode}")
                try:
                    await nc.request("ore.admin.health", b"{}", timeout=0.5)
                    return
                except Exception:
                    await asyncio.sleep(0.1)
            raise RuntimeError(f"ore serve did not answer ore.admin.health in {patience} tries")
        finally:
            await nc.close()

    asyncio.run(ask())


def start_profiler(
    directory: str | None, side: str, run: str, pids: dict[str, int]
) -> list[subprocess.Popen[bytes]]:
    """py-spy on the worker and the client during a phase (`--profile DIR`;
    sampling costs the profiled processes a little CPU, so profiled rounds are not figures)."""
    if not directory:
        return []
    spy = str(Path(sys.executable).with_name("py-spy"))
    spies = []
    for name in ("worker", "client"):
        out = Path(directory) / f"{side}-{run}-{name}.txt"
        command = [spy, "record", "-p", str(pids[name]), "-r", "200", "-f", "raw", "-o", str(out)]
        spies.append(subprocess.Popen([*command, "--nonblocking"], stdout=subprocess.DEVNULL))
    return spies


def stop_profiler(spies: list[subprocess.Popen[bytes]]) -> None:
    for spy in spies:
        spy.send_signal(2)  # SIGINT: py-spy writes what it sampled and exits
    for spy in spies:
        spy.wait(30)


def start_strace(enabled: bool, pid: int) -> tuple[subprocess.Popen[bytes], Path] | None:
    """`strace -f -c` attached to every thread of `pid` (`--syscalls`), or None."""
    if not enabled:
        return None
    out = Path(tempfile.mkstemp(prefix="ore-hotpath-strace-", suffix=".txt")[1])
    tracer = subprocess.Popen(
        ["strace", "-f", "-c", "-o", str(out), "-p", str(pid)], stderr=subprocess.DEVNULL
    )
    time.sleep(1.0)  # attaching to every thread takes a moment; the phase must not start first
    return tracer, out


def stop_strace(
    traced: tuple[subprocess.Popen[bytes], Path] | None, turns: int
) -> dict[str, float]:
    """Detach (SIGINT makes strace write its summary) and return system calls per turn."""
    if traced is None:
        return {}
    tracer, out = traced
    tracer.send_signal(2)
    tracer.wait(60)
    calls: dict[str, float] = {}
    for line in out.read_text().splitlines():
        fields = line.split()
        # "% time  seconds  usecs/call  calls  [errors]  syscall"; not the total line
        if len(fields) >= 5 and fields[0][0].isdigit() and fields[-1] != "total":
            calls[fields[-1]] = int(fields[3]) / turns
    out.unlink()
    return calls


def start_perf(enabled: bool, pid: int) -> tuple[subprocess.Popen[bytes], Path] | None:
    """`perf record` of every thread of `pid` (`--libraries`), or None."""
    if not enabled:
        return None
    out = Path(tempfile.mkstemp(prefix="ore-hotpath-perf-", suffix=".data")[1])
    recorder = subprocess.Popen(
        ["perf", "record", "-q", "-F", "999", "-p", str(pid), "-o", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    time.sleep(0.5)  # attached before the phase starts
    return recorder, out


LIBRARIES = (  # (what a sample's object file name contains, the name it is counted under)
    ("libpython", "Python interpreter"),
    ("kernel", "kernel"),
    ("libc.so", "libc (malloc, memcpy)"),
    ("sqlite3", "SQLite"),
    ("pydantic_core", "pydantic-core"),
    ("orjson", "orjson"),
)


def stop_perf(recorded: tuple[subprocess.Popen[bytes], Path] | None, pid: int) -> dict[str, float]:
    """Stop recording; each (thread, library)'s share of the samples, summing to 1."""
    if recorded is None:
        return {}
    recorder, out = recorded
    recorder.send_signal(2)  # SIGINT: perf writes what it sampled and exits
    recorder.wait(60)
    script = subprocess.run(
        ["perf", "script", "-i", str(out), "-F", "tid,ip,dso"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    out.unlink()
    counts: Counter[str] = Counter()
    for line in script.splitlines():
        fields = line.split()
        if len(fields) < 3:
            continue
        thread = "main" if fields[0] == str(pid) else "threads"
        where = next((name for part, name in LIBRARIES if part in fields[-1]), "other")
        counts[f"lib {thread} {where}"] += 1
    total = sum(counts.values()) or 1
    return {key: count / total for key, count in counts.items()}


def run_side(
    side: str,
    server_url: str,
    monitor: str,
    nats_pid: int,
    tmp: Path,
    args: argparse.Namespace,
    run: str,
    wrap: tuple[str, ...] = (),
    ore_runner: tuple[str, ...] = (),
) -> dict[str, float]:
    """One side's phases; `wrap` is a command the worker runs under (valgrind), and
    `ore_runner` what runs ore's CLI instead of the `ore` executable (bench/bytecodes.py)."""
    me = [sys.executable, __file__, "--url", server_url]
    if side == "raw":
        worker = Child([*wrap, *me, "--role", "raw-worker"])
        worker.answer()
    elif side == "floor":
        db = str(tmp / f"floor-{run}.db")
        worker = Child([*wrap, *me, "--role", "floor-worker", "--db", db])
        worker.answer()
    else:
        env = {
            **os.environ,
            "ORE_LOAD_PLUGINS": "",  # built-in plugins only, as a bare install has
            "ORE_STORE__NAME": args.store,
            "ORE_CONFIG": str(tmp / "ore.toml"),
        }
        if wrap or ore_runner:
            env["ORE_NATS__LEASE_TTL"] = "60"  # slowed down: see the module docstring
        if args.store != "memory":
            env["ORE_STORE__PATH"] = str(tmp / f"ore-{run}.db")
        (tmp / "ore.toml").write_text("")
        log = (tmp / f"ore-serve-{run}.log").open("wb")
        ore = args.before if side == "before" else str(Path(sys.executable).with_name("ore"))
        runner = ore_runner or (ore,)
        worker = Child([*wrap, *runner, "serve", "--nats", server_url], env=env, log=log)
        wait_core_ready(server_url, worker, patience=3000 if wrap or ore_runner else 300)
    role = {"raw": "raw-client", "floor": "floor-client"}.get(side, "ore-client")
    client = Child(
        [
            *me,
            *("--role", role, "--run", run, "--threads", str(args.threads)),
            *("--per-thread", str(args.per_thread), "--latency", str(args.latency)),
        ]
    )
    try:
        client.answer()  # warmed up
        pids = {"worker": worker.pid, "nats": nats_pid, "client": client.pid}
        spy = start_profiler(args.profile, side, run, pids)
        traced = start_strace(getattr(args, "syscalls", False), worker.pid)
        recorded = start_perf(getattr(args, "libraries", False), worker.pid)
        before = Probe(monitor, pids)
        client.send("throughput")
        result = client.answer()
        after = Probe(monitor, pids)
        stop_profiler(spy)
        figures = per_turn(before, after, result["turns"])
        figures["rate"] = result["turns"] / result["seconds"]
        for name, count in stop_strace(traced, result["turns"]).items():
            figures[f"syscall {name}"] = count
        for name, share in stop_perf(recorded, worker.pid).items():
            figures[name] = share * figures["cpu_worker"]
        spy = start_profiler(args.profile, side, f"{run}-latency", pids)
        before = Probe(monitor, pids)
        client.send("latency")
        result = client.answer()
        after = Probe(monitor, pids)
        stop_profiler(spy)
        figures["p50_ms"] = result["p50"] * 1e3
        one = per_turn(before, after, result["turns"])
        for name in ("worker", "nats", "client", "total"):
            figures[f"cpu_{name}_1thread"] = one[f"cpu_{name}"]
        client.send("quit")
        client.process.wait(30)
    finally:
        client.stop()
        if side in ("raw", "floor"):
            worker.send("quit")
            try:
                worker.process.wait(300 if wrap else 10)
            except subprocess.TimeoutExpired:
                pass
        worker.stop(300 if wrap else 30)
    return figures


ROWS = [
    ("cpu_worker", "core CPU per turn, 100 threads (µs)", "{:.1f}", 6.0, "<="),
    ("cpu_worker_main", "core CPU per turn, its main thread only (µs)", "{:.1f}", None, ""),
    ("kernel_worker", "core kernel CPU per turn (µs)", "{:.1f}", None, ""),
    ("switches_worker", "core context switches per turn", "{:.2f}", None, ""),
    ("switches_worker_main", "core context switches per turn, its main thread", "{:.2f}", None, ""),
    ("switches_worker_preempted", "core context switches per turn, preempted", "{:.2f}", None, ""),
    ("cpu_nats", "nats-server CPU per turn (µs)", "{:.1f}", None, ""),
    ("cpu_client", "client CPU per turn (µs)", "{:.1f}", 2.0, "<="),
    ("cpu_total", "CPU per turn, core+nats+client (µs)", "{:.1f}", 2.5, "<="),
    ("rate", "throughput, 100 threads (turns/s)", "{:,.0f}", 0.4, ">="),
    ("p50_ms", "p50 latency, 1 thread (ms)", "{:.3f}", 2.5, "<="),
    ("cpu_worker_1thread", "core CPU per turn, 1 thread (µs)", "{:.1f}", None, ""),
    ("cpu_nats_1thread", "nats-server CPU per turn, 1 thread (µs)", "{:.1f}", None, ""),
    ("cpu_client_1thread", "client CPU per turn, 1 thread (µs)", "{:.1f}", None, ""),
    ("cpu_total_1thread", "CPU per turn, 1 thread (µs)", "{:.1f}", None, ""),
    ("msgs_in", "NATS messages in per turn", "{:.2f}", None, ""),
    ("msgs_out", "NATS messages out per turn", "{:.2f}", None, ""),
    ("stored", "JetStream messages stored per turn", "{:.2f}", None, ""),
]


def compared(
    rounds: list[dict[str, dict[str, float]]], key: str, base: str
) -> tuple[float, float, float, str]:
    """Medians of `key` for ore and `base`, their ratio, and the ratio's range per round."""
    ore = statistics.median(r["ore"][key] for r in rounds)
    other = statistics.median(r[base][key] for r in rounds)
    ratios = [r["ore"][key] / r[base][key] for r in rounds if r[base][key]]
    spread = f" ({min(ratios):.2f}-{max(ratios):.2f})" if len(ratios) > 1 else ""
    return ore, other, ore / other if other else float("nan"), spread


def report(rounds: list[dict[str, dict[str, float]]], args: argparse.Namespace) -> None:
    print(
        f"python {sys.version.split()[0]}, {os.cpu_count()} cpus, load "
        f"{os.getloadavg()[0]:.1f}; {args.threads} threads x {args.per_thread} turns; "
        f"latency {args.latency} turns; {len(rounds)} round(s)"
    )
    print()
    print("| figure | ore serve | raw loop | ratio | goal |")
    print("|---|---|---|---|---|")
    for key, label, fmt, goal, sense in ROWS:
        ore, raw, ratio, spread = compared(rounds, key, "raw")
        met = ""
        if goal is not None:
            ok = ratio <= goal if sense == "<=" else ratio >= goal
            met = f"{sense} {goal:g}x {'met' if ok else 'NOT met'}"
        print(f"| {label} | {fmt.format(ore)} | {fmt.format(raw)} | {ratio:.2f}x{spread} | {met} |")
    print()
    print("client CPU ratio = a ConduitClient conduit receiving each answer vs the raw client.")
    if args.before:
        report_before(rounds)
    if args.floor:
        report_floor(rounds)
    if getattr(args, "syscalls", False):
        report_syscalls(rounds)
    if getattr(args, "libraries", False):
        report_libraries(rounds)


def report_libraries(rounds: list[dict[str, dict[str, float]]]) -> None:
    """Each worker's CPU per turn by thread and library (`--libraries`), medians over the
    rounds: its measured CPU per turn split by where perf's samples landed."""
    sides = list(rounds[0])

    def median(side: str, key: str) -> float:
        return statistics.median(r[side].get(key, 0.0) for r in rounds)

    print()
    print("| CPU per turn (µs) by thread and library | " + " | ".join(sides) + " |")
    print("|---|" + "---|" * len(sides))
    for thread in ("main", "threads"):
        for _part, name in (*LIBRARIES, ("", "other")):
            key = f"lib {thread} {name}"
            if max(median(side, key) for side in sides) >= 0.5:
                row = " | ".join(f"{median(side, key):.1f}" for side in sides)
                label = name if thread == "main" else f"{name}, other threads"
                print(f"| {label} | {row} |")


def report_syscalls(rounds: list[dict[str, dict[str, float]]], least: float = 0.05) -> None:
    """Each worker's system calls per turn in the throughput phase (`--syscalls`), medians
    over the rounds, the calls made at least `least` times per turn by some worker."""
    sides = list(rounds[0])
    names = {key for r in rounds for side in sides for key in r[side] if key.startswith("syscall ")}

    def median(side: str, key: str) -> float:
        return statistics.median(r[side].get(key, 0.0) for r in rounds)

    print()
    print("| system calls per turn | " + " | ".join(sides) + " |")
    print("|---|" + "---|" * len(sides))
    totals = {side: sum(median(side, key) for key in names) for side in sides}
    print("| all | " + " | ".join(f"{totals[side]:.2f}" for side in sides) + " |")
    for key in sorted(names, key=lambda k: -max(median(side, k) for side in sides)):
        if max(median(side, key) for side in sides) >= least:
            row = " | ".join(f"{median(side, key):.2f}" for side in sides)
            print(f"| {key.removeprefix('syscall ')} | {row} |")


def report_before(rounds: list[dict[str, dict[str, float]]]) -> None:
    """ore against the `--before` core, measured alternately under the same nats-server."""
    print()
    print("| figure | ore serve | --before | ratio |")
    print("|---|---|---|---|")
    for key, label, fmt, _goal, _sense in ROWS:
        ore, before, ratio, spread = compared(rounds, key, "before")
        print(f"| {label} | {fmt.format(ore)} | {fmt.format(before)} | {ratio:.2f}x{spread} |")


def report_floor(rounds: list[dict[str, dict[str, float]]]) -> None:
    """The floor against the raw loop and ore against the floor: how much of ore's cost is
    the durable work every design must do, and how much the framework's."""
    print()
    print("| figure | floor | floor / raw | ore / floor |")
    print("|---|---|---|---|")
    for key, label, fmt, _goal, _sense in ROWS:
        floor = statistics.median(r["floor"][key] for r in rounds)
        raw = statistics.median(r["raw"][key] for r in rounds)
        ore = statistics.median(r["ore"][key] for r in rounds)
        print(
            f"| {label} | {fmt.format(floor)} | {floor / raw:.2f}x | {ore / floor:.2f}x |"
            if raw and floor
            else f"| {label} | {fmt.format(floor)} | | |"
        )
    threads = sorted({key for r in rounds for key in r["ore"] if key.startswith("switches thread")})
    if threads:
        spread = ", ".join(
            f"{key.removeprefix('switches thread ')} "
            f"{statistics.median(r['ore'].get(key, 0.0) for r in rounds):.2f}"
            for key in threads
        )
        print()
        print(f"ore's context switches per turn beside its main thread: {spread}")


def instructions_per_turn(
    side: str, server: Any, tmp: Path, args: argparse.Namespace, index: int
) -> float:
    """The side's worker instructions per turn: two runs under cachegrind, `--per-thread`
    and twice as many turns, differenced (see the module docstring)."""
    totals = []
    for size in (args.per_thread, 2 * args.per_thread):
        out = tmp / f"cachegrind-{side}-{index}-{size}.out"
        wrap = (
            "valgrind",
            "-q",
            "--tool=cachegrind",
            "--cache-sim=no",
            f"--cachegrind-out-file={out}",
        )
        sized = argparse.Namespace(**{**vars(args), "per_thread": size, "latency": 1})
        run_side(
            side,
            server.url,
            server.monitor_url,
            server.pid,
            tmp,
            sized,
            f"i{index}{side[0]}{size}",
            wrap,
        )
        totals.append(cachegrind_total(out))
    return (totals[1] - totals[0]) / (args.threads * args.per_thread)


def bytecodes_per_turn(
    server: Any, tmp: Path, args: argparse.Namespace, side: str = "ore"
) -> dict[str, float]:
    """Python bytecodes per turn of a side's worker (`ore serve`, the raw or the floor
    worker), per function (bench/bytecodes.py), from two runs of `--per-thread` and twice
    as many turns, differenced."""
    counts = []
    for size in (args.per_thread, 2 * args.per_thread):
        out = tmp / f"bytecodes-{side}-{size}.json"
        runner = (sys.executable, str(Path(__file__).with_name("bytecodes.py")), str(out))
        sized = argparse.Namespace(**{**vars(args), "per_thread": size, "latency": 1})
        run_side(
            side,
            server.url,
            server.monitor_url,
            server.pid,
            tmp,
            sized,
            f"b{side[0]}{size}",
            **({"ore_runner": runner} if side == "ore" else {"wrap": (*runner, "--script")}),
        )
        counts.append(json.loads(out.read_text()))
    turns = args.threads * args.per_thread
    return {where: (count - counts[0].get(where, 0)) / turns for where, count in counts[1].items()}


def report_bytecodes(per_turn: dict[str, float], top: int) -> None:
    by_file: dict[str, float] = {}
    for where, count in per_turn.items():
        path = where.split(":")[0]
        by_file[path] = by_file.get(path, 0) + count
    print(f"`ore serve`: {sum(per_turn.values()):,.0f} Python bytecodes per turn")
    print()
    print("| bytecodes per turn | file |")
    print("|---|---|")
    for path, count in sorted(by_file.items(), key=lambda item: -item[1])[:top]:
        print(f"| {count:,.0f} | {path} |")
    print()
    print("| bytecodes per turn | function |")
    print("|---|---|")
    for where, count in sorted(per_turn.items(), key=lambda item: -item[1])[:top]:
        print(f"| {count:,.0f} | {where} |")


def cachegrind_total(path: Path) -> int:
    """The instructions a cachegrind run counted (its `summary:` line)."""
    for line in path.read_text().splitlines():
        if line.startswith("summary:"):
            return int(line.split()[1])
    raise RuntimeError(f"{path}: no summary line (did the worker exit cleanly?)")


def report_instructions(rounds: list[dict[str, float]], args: argparse.Namespace) -> None:
    print(
        f"python {sys.version.split()[0]}, {os.cpu_count()} cpus; {args.threads} threads x "
        f"{args.per_thread} (and {2 * args.per_thread}) turns; {len(rounds)} round(s)"
    )
    print()
    print("| worker | instructions per turn (thousands) | / raw | ore / it |")
    print("|---|---|---|---|")
    for side in rounds[0]:
        counts = [r[side] / 1e3 for r in rounds]
        spread = f" ({min(counts):,.0f}-{max(counts):,.0f})" if len(counts) > 1 else ""
        per_raw = [r[side] / r["raw"] for r in rounds]
        per_ore = [r["ore"] / r[side] for r in rounds]
        print(
            f"| {side} | {statistics.median(counts):,.0f}{spread} | "
            f"{statistics.median(per_raw):.2f}x | {statistics.median(per_ore):.2f}x |"
        )


def sync_config(sync: str) -> str:
    """The nats-server's fsync policy as `ore serve`'s embedded server would get it."""
    from ore_core.bus.server.durability import SyncPolicy

    return SyncPolicy(sync).server_config()


def main(args: argparse.Namespace) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from ore_core.bus.server.embedded import EmbeddedNatsServer

    sides = ["raw", "ore"] + ["before"] * bool(args.before) + ["floor"] * args.floor
    if args.bytecodes:
        with (
            tempfile.TemporaryDirectory(prefix="ore-hotpath-") as name,
            EmbeddedNatsServer(Path(name) / "nats") as server,
        ):
            per_turn = bytecodes_per_turn(server, Path(name), args)
            others = {
                side: sum(bytecodes_per_turn(server, Path(name), args, side).values())
                for side in ("raw", "floor")
                if side == "raw" or args.floor
            }
        report_bytecodes(per_turn, args.bytecodes)
        print()
        print("| worker | Python bytecodes per turn | ore / it |")
        print("|---|---|---|")
        for side, count in others.items():
            print(f"| {side} | {count:,.0f} | {sum(per_turn.values()) / count:.2f}x |")
        return
    if args.instructions:
        if shutil.which("valgrind") is None:
            sys.exit("--instructions needs valgrind (cachegrind) on PATH")
        counted: list[dict[str, float]] = []
        with tempfile.TemporaryDirectory(prefix="ore-hotpath-") as name:
            tmp = Path(name)
            with EmbeddedNatsServer(tmp / "nats") as server:
                for index in range(args.rounds):
                    counted.append(
                        {
                            side: instructions_per_turn(side, server, tmp, args, index)
                            for side in sides
                        }
                    )
                    print(f"round {index + 1}: " + json.dumps(counted[-1]), file=sys.stderr)
        report_instructions(counted, args)
        return
    rounds = []
    with tempfile.TemporaryDirectory(prefix="ore-hotpath-") as name:
        tmp = Path(name)
        with EmbeddedNatsServer(tmp / "nats", config=sync_config(args.sync)) as server:
            for index in range(args.rounds):
                result = {}
                for side in sides:
                    result[side] = run_side(
                        side,
                        server.url,
                        server.monitor_url,
                        server.pid,
                        tmp,
                        args,
                        f"r{index}{side[0]}",
                    )
                rounds.append(result)
                print(f"round {index + 1}: " + json.dumps(result), file=sys.stderr)
    report(rounds, args)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--threads", type=int, default=100)
    parser.add_argument("--per-thread", type=int, default=30)
    parser.add_argument("--latency", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument(
        "--sync", default="always", help="nats-server fsync policy, as nats.sync (default always)"
    )
    parser.add_argument("--store", default="sqlite", help="the core's store (default sqlite)")
    parser.add_argument(
        "--before",
        metavar="ORE",
        help="another install's `ore` executable, measured in every round as a third side",
    )
    parser.add_argument(
        "--profile", metavar="DIR", help="py-spy each worker into DIR (pip install py-spy)"
    )
    parser.add_argument(
        "--floor",
        action="store_true",
        help="also measure the floor: ore's durable work per turn without the framework",
    )
    parser.add_argument(
        "--instructions",
        action="store_true",
        help="count each worker's instructions per turn under valgrind instead of CPU time",
    )
    parser.add_argument(
        "--bytecodes",
        type=int,
        metavar="TOP",
        default=0,
        help="count `ore serve`'s Python bytecodes per turn per function; print the TOP",
    )
    parser.add_argument(
        "--syscalls",
        action="store_true",
        help="strace each worker in the throughput phase; print its system calls per turn",
    )
    parser.add_argument(
        "--libraries",
        action="store_true",
        help="perf-sample each worker in the throughput phase; split its CPU by library",
    )
    parser.add_argument(
        "--role",
        choices=["raw-worker", "raw-client", "ore-client", "floor-worker", "floor-client"],
    )
    parser.add_argument("--db", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--run", default="", help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.role == "raw-worker":
        asyncio.run(raw_worker_main(arguments))
    elif arguments.role == "floor-worker":
        asyncio.run(floor_worker_main(arguments))
    elif arguments.role:
        asyncio.run(client_main(arguments))
    else:
        main(arguments)
