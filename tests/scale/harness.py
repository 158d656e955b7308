"""Several real `ore serve` processes on one NATS, a conversational load, and its audit.

Used by the scale tests and by `bench/workers.py`. Every worker is a real `ore serve`
process (SQLite store shared by all, echo processor with a delay); the load is raw
protocol.md traffic from this process. The audit reads what was stored (ORE_EVENTS and
the SQLite threads), not what the workers say, and counts per message:
lost (never answered), answered twice, and per-thread order violations.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import subprocess
import time
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import DeliverPolicy

from ore_core.bus.cluster.kv_keys import live_keys
from tests.ore_process import ORE

READY_TIMEOUT = 30.0  # a fresh interpreter imports ore first; the machine is shared
EXIT_TIMEOUT = 40.0


@dataclass
class Worker:
    """One `ore serve` process."""

    process: subprocess.Popen[bytes]
    log_path: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def log(self) -> list[dict[str, Any]]:
        """Its JSON log lines."""
        lines = []
        for line in self.log_path.read_text(errors="replace").splitlines():
            if line.startswith("{"):
                try:
                    lines.append(json.loads(line))
                except ValueError:
                    pass
        return lines

    def signal(self, signum: int) -> None:
        """Send `signum` to this worker's own pid."""
        if self.alive:
            os.kill(self.process.pid, signum)

    async def wait(self) -> int:
        """Its exit status (bounded by EXIT_TIMEOUT, waited for off the event loop)."""
        return await asyncio.to_thread(self.process.wait, EXIT_TIMEOUT)


class Workers:
    """Starts `ore serve` workers against `servers`, all on one SQLite file."""

    def __init__(
        self,
        servers: list[str],
        directory: Path,
        *,
        delay: float = 0.3,
        partitions: int = 32,
        env: dict[str, str] | None = None,
        ready_timeout: float = READY_TIMEOUT,
    ) -> None:
        self.servers = servers
        self.ready_timeout = ready_timeout
        self.directory = directory
        self.store_path = directory / "threads.db"
        self.delay = delay
        self.partitions = partitions
        self.env = env or {}
        self.started: list[Worker] = []

    async def start(self, *, wait: bool = True) -> Worker:
        """Start one more worker; return once it serves (it logged "ore core serving")."""
        index = len(self.started)
        log_path = self.directory / f"worker{index}.log"
        env = {
            **{k: v for k, v in os.environ.items() if not k.upper().startswith("ORE_")},
            "ORE_LOAD_PLUGINS": "",
            "ORE_STORE__NAME": "sqlite",
            "ORE_STORE__PATH": str(self.store_path),
            "ORE_PROCESSOR__NAME": "echo",
            "ORE_PROCESSOR__DELAY": str(self.delay),
            "ORE_LOG__FORMAT": "json",
            "XDG_CONFIG_HOME": str(self.directory / "config"),
            "XDG_STATE_HOME": str(self.directory / "state"),
            **self.env,
        }
        args = [str(ORE), "serve", "--partitions", str(self.partitions)]
        for url in self.servers:
            args += ["--nats", url]
        with log_path.open("wb") as log:
            process = subprocess.Popen(  # noqa: ASYNC220 (returns at once)
                args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env
            )
        worker = Worker(process, log_path)
        self.started.append(worker)
        if wait:
            await self.wait_serving(worker)
        return worker

    async def wait_serving(self, worker: Worker) -> None:
        deadline = time.monotonic() + self.ready_timeout
        while not any(line.get("event") == "ore core serving" for line in worker.log()):
            if not worker.alive:
                raise RuntimeError(f"ore serve exited early:\n{worker.log_path.read_text()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"ore serve not serving in time:\n{worker.log_path.read_text()}")
            await asyncio.sleep(0.05)

    def stop_all(self) -> None:
        """SIGKILL every worker still running (by pid) and reap it."""
        for worker in self.started:
            if worker.alive:
                worker.signal(signal.SIGCONT)
                worker.signal(signal.SIGKILL)
            worker.process.wait()


async def leases(nc: Client, bucket: str = "ORE_WORKERS") -> dict[int, str]:
    """partition -> worker id, from the KV bucket (what the server says now).

    Listed exactly (`live_keys`): nats-py's `kv.keys()` is a watch whose "initial
    values done" marker can race its deliveries, so it sometimes lists fewer keys
    than the bucket holds (a test then reads 0 leases of a worker holding them all).
    """
    kv = await nc.jetstream().key_value(bucket)
    held = {}
    for key in await live_keys(nc, bucket, "lease.>", 5.0):
        try:
            entry = await kv.get(key)
        except Exception:  # deleted or expired meanwhile
            continue
        held[int(key.split(".")[1])] = (entry.value or b"").decode()
    return held


def held_by(table: dict[int, str], worker: Worker) -> list[int]:
    """The partitions `worker` (recognised by the pid in its id) holds in `table`."""
    return sorted(p for p, owner in table.items() if f"-{worker.pid}-" in owner)


@dataclass
class Report:
    """The audit of one load run."""

    sent: int = 0
    answered: int = 0
    lost: int = 0
    doubled: int = 0
    order_violations: int = 0
    store_lost: int = 0
    store_doubled: int = 0
    store_order_violations: int = 0
    details: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not (
            self.lost
            or self.doubled
            or self.order_violations
            or self.store_lost
            or self.store_doubled
            or self.store_order_violations
        )


class Load:
    """`threads` conversations, each sending numbered messages ("<thread>:<n>")."""

    def __init__(self, nc: Client, threads: int, *, prefix: str = "t") -> None:
        self.nc = nc
        self.threads = [f"{prefix}{i:04d}" for i in range(threads)]
        self.sent: dict[str, int] = defaultdict(int)
        self.answer_times: dict[tuple[str, int], list[float]] = defaultdict(list)
        self.sent_at: dict[tuple[str, int], tuple[float, float]] = {}  # (publishing, stored)
        self.recorded: set[tuple[str, int]] = set()  # user turns stored: their turn began
        self._waiters: dict[tuple[str, int], asyncio.Future[None]] = {}
        self._changed = asyncio.Event()

    async def listen(self) -> None:
        """Record every stored assistant answer republished on `ore.out.load.*`."""
        await self.nc.subscribe("ore.out.load.*", cb=self._on_output)
        await self.nc.flush()

    async def _on_output(self, msg: Msg) -> None:
        headers = msg.headers or {}
        if "Nats-Sequence" not in headers:
            return  # live only (deltas, notices): not stored
        for event in _turn_completes(headers, msg.data):
            answer = _answer_of(event)
            if answer is not None:
                self.answer_times[answer].append(time.monotonic())
                self._changed.set()
                waiter = self._waiters.pop(answer, None)
                if waiter is not None and not waiter.done():
                    waiter.set_result(None)
            else:
                user = _answer_of(event, role="user")
                if user is not None:
                    self.recorded.add(user)

    async def send(self, thread_id: str) -> None:
        """The thread's next message, published with a JetStream ack (retried)."""
        n = self.sent[thread_id] + 1
        payload = {
            "kind": "user_message",
            "id": f"{thread_id}-{n}",
            "content": f"{thread_id}:{n}",
            "context": {"provenance": "load"},
        }
        data = json.dumps(payload).encode()
        js = self.nc.jetstream()
        publishing = time.monotonic()
        for _ in range(60):  # a cluster node may be down: retry with the same id
            try:
                await js.publish(
                    f"ore.in.load.{thread_id}",
                    data,
                    headers={"Nats-Msg-Id": payload["id"]},
                    timeout=2,
                )
                break
            except Exception:
                await asyncio.sleep(0.25)
        else:
            raise RuntimeError(f"could not publish {payload['id']}")
        self.sent_at[(thread_id, n)] = (publishing, time.monotonic())
        self.sent[thread_id] = n

    async def answer(self, thread_id: str, n: int) -> None:
        """Until message n of the thread is answered (bound it with a timeout)."""
        if (thread_id, n) in self.answer_times:
            return
        waiter = self._waiters.get((thread_id, n))
        if waiter is None:
            waiter = self._waiters[(thread_id, n)] = asyncio.get_running_loop().create_future()
        await waiter

    async def send_round(self) -> None:
        """One more message on every thread (concurrently)."""
        await asyncio.gather(*(self.send(t) for t in self.threads))

    @property
    def total_sent(self) -> int:
        return sum(self.sent.values())

    def answered(self) -> int:
        return len(self.answer_times)

    async def wait_answered(self, limit: float, sent: Mapping[str, int] | None = None) -> None:
        """Until every message sent (or of `sent`: thread -> its last number, messages
        another process sent too) has an answer (or `limit` s: then return anyway)."""
        try:
            async with asyncio.timeout(limit):
                while not (
                    self.answered() >= self.total_sent if sent is None else self.has_answered(sent)
                ):
                    self._changed.clear()
                    await self._changed.wait()
        except TimeoutError:
            pass

    def has_answered(self, sent: Mapping[str, int]) -> bool:
        """Whether messages 1..n of every thread of `sent` (thread -> n) have an answer."""
        return all(
            (thread_id, n) in self.answer_times
            for thread_id, last in sent.items()
            for n in range(1, last + 1)
        )

    def first_answer_after(self, moment: float, threads: set[str]) -> dict[str, float]:
        """Per thread of `threads`: seconds from `moment` to its first answer after it."""
        first: dict[str, float] = {}
        for (thread_id, _), times in self.answer_times.items():
            if thread_id not in threads:
                continue
            for t in times:
                if t > moment and (thread_id not in first or t - moment < first[thread_id]):
                    first[thread_id] = t - moment
        return first

    def outage(self, moment: float) -> tuple[float, float]:
        """The longest waits of messages a fault at `moment` delayed: (from publishing,
        or `moment` if later, to the answer; from the publish ack to the answer).

        The first includes a publish that JetStream held up (an election of `ORE_IN`),
        the second only what the workers took once the message was stored."""
        whole = worker = 0.0
        for key, times in self.answer_times.items():
            sent = self.sent_at.get(key)
            if sent is None or not times:
                continue
            answered = min(times)
            if answered <= moment:
                continue
            whole = max(whole, answered - max(sent[0], moment))
            worker = max(worker, answered - max(sent[1], moment))
        return whole, worker

    async def audit(self, store_path: Path | None = None) -> Report:
        """Count lost, doubled and out-of-order answers in ORE_EVENTS (and the store)."""
        report = Report(sent=self.total_sent)
        answers = await stored_answers(self.nc)
        for thread_id in self.threads:
            got = answers.get(thread_id, [])
            report.answered += len(set(got))
            expected = set(range(1, self.sent[thread_id] + 1))
            lost = expected - set(got)
            doubled = len(got) - len(set(got))
            disorder = sum(1 for a, b in itertools.pairwise(got) if b <= a)
            report.lost += len(lost)
            report.doubled += doubled
            report.order_violations += disorder
            if lost or doubled or disorder:
                report.details.append(f"events {thread_id}: {got} (sent {self.sent[thread_id]})")
        if store_path is not None:
            await self._audit_store(store_path, report)
        return report

    async def _audit_store(self, store_path: Path, report: Report) -> None:
        from ore_core.session.stores.sqlite_store import SQLiteStore
        from ore_core.turn import Role

        store = SQLiteStore(store_path)
        try:
            for thread_id in self.threads:
                thread = await store.get(thread_id)
                users: list[int] = []
                answers: list[int] = []
                for turn in thread.turns():  # the active path: order
                    (users if turn.role == Role.USER else answers).append(_number(turn))
                # Every answer stored, on any branch: a stale writer's save shows up here.
                stored = [_number(t) for t in thread.all_turns() if t.role != Role.USER]
                expected = list(range(1, self.sent[thread_id] + 1))
                lost = set(expected) - set(answers)
                doubled = len(stored) - len(set(stored)) + len(users) - len(set(users))
                disorder = sum(1 for a, b in itertools.pairwise(answers) if b <= a)
                report.store_lost += len(lost)
                report.store_doubled += doubled
                report.store_order_violations += disorder
                if lost or doubled or disorder:
                    report.details.append(
                        f"store {thread_id}: users {users} answers {answers} all {stored}"
                    )
        finally:
            await store.close()


def _number(turn: Any) -> int:
    """n of a turn whose text is "<thread>:<n>" (-1 for anything else)."""
    text = "".join(getattr(a, "content", "") for a in turn.artifacts)
    n = text.rpartition(":")[2]
    return int(n) if n.isdigit() else -1


def _answer_of(event: dict[str, Any], role: str = "assistant") -> tuple[str, int] | None:
    """(thread, n) of an assistant (or `role`) turn_complete with text "<thread>:<n>"."""
    turn = event.get("turn") or {}
    if turn.get("role") != role:
        return None
    text = "".join((a.get("data") or {}).get("content", "") for a in turn.get("artifacts", []))
    thread_id, _, n = text.rpartition(":")
    return (thread_id, int(n)) if thread_id and n.isdigit() else None


def _turn_completes(headers: dict[str, str], data: bytes) -> list[dict[str, Any]]:
    """The turn_complete events of one stored message: a batch (issue 11) or one event."""
    kind = headers.get("Ore-Kind")
    if kind == "batch":
        events = json.loads(data).get("events") or []
    elif kind == "turn_complete":
        events = [json.loads(data)]
    else:
        return []
    return [e for e in events if isinstance(e, dict) and e.get("kind") == "turn_complete"]


async def stored_answers(nc: Client) -> dict[str, list[int]]:
    """Per thread, the n of every stored assistant answer, in stream order."""
    js = nc.jetstream()
    info = await js.stream_info("ORE_EVENTS")
    total = info.state.messages
    answers: dict[str, list[int]] = defaultdict(list)
    if not total:
        return answers
    sub = await js.subscribe("ore.ev.>", ordered_consumer=True, deliver_policy=DeliverPolicy.ALL)
    try:
        seen = 0
        while seen < total:
            msg = await sub.next_msg(timeout=10)
            seen += 1
            for event in _turn_completes(msg.headers or {}, msg.data):
                answer = _answer_of(event)
                if answer is not None:
                    answers[answer[0]].append(answer[1])
    finally:
        await sub.unsubscribe()
    return answers


async def inbound_sequences(nc: Client) -> dict[tuple[str, int], list[int]]:
    """(thread, n) -> the `ORE_IN` stream sequences holding that load message: where a
    lost message was stored by JetStream (the bus gave it to no worker) or not at all."""
    js = nc.jetstream()
    info = await js.stream_info("ORE_IN")
    total = info.state.messages
    found: dict[tuple[str, int], list[int]] = defaultdict(list)
    if not total:
        return found
    sub = await js.subscribe(
        "ore.inp.>", stream="ORE_IN", ordered_consumer=True, deliver_policy=DeliverPolicy.ALL
    )
    try:
        for _ in range(total):
            msg = await sub.next_msg(timeout=10)
            thread_id, _, n = str(json.loads(msg.data).get("content", "")).rpartition(":")
            if thread_id and n.isdigit():
                found[(thread_id, int(n))].append(msg.metadata.sequence.stream)
    finally:
        await sub.unsubscribe()
    return found
