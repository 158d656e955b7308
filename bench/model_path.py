"""The model path: first token and last token through ore against calling the model directly.

Run: `python bench/model_path.py [--quick] [--concurrency 1,50,200] [--per-thread N]
[--history 200] [--profile DIR] [--compaction-turns 500] [--window 8000]
[--only-compaction] [--sync always]` (`--sync`: the nats-server's fsync policy, as
`nats.sync`).

Processes, each on its own: a nats-server (embedded, file storage), the OpenAI-compatible
mock (`python -m ore_openai.testing`: 50 chunks of 4 characters, 20 ms before each,
every content chunk stamped with its send time), and `ore serve --nats URL` with the
openai processor pointed at the mock and the default SQLite store. This process is
the client of both sides, one side after the other at the same concurrency:

  direct  the openai SDK streaming from the mock (what an application calling the
          model itself sees);
  ore     a raw nats-py client: a `user_message` published on `ore.in.bench.T`, the
          answer read from `ore.out.bench.>` until `lifecycle: done`.

Per concurrency C (C threads, each sending its next message when the previous one is
answered, after one unmeasured turn each) it reports first token (the first text
delta) and completion (the end of the model's stream; `done` through ore), p50 and
p99, each side's, and ore's overhead as the difference of the two sides' figures in
this run; delta lag (a text chunk's arrival minus its send time at the mock: the
pacing of live deltas, `session.delta_interval`); and the core's CPU per model turn
(`/proc/PID/stat` of `ore serve`, all its threads). Then one thread whose message makes
the model call a tool first (two model calls per turn), and one thread with a long
history (`--history` turns) to show the cost of building a request from it. The goals
table compares with the direct call of the same run; the last row is
bench/request_build.py's in-process measure (request build vs serialising the turns).
The last table is bench/compaction_cost.py's, in process: a thread of
`--compaction-turns` turns with and without compaction (`--window` tokens): the size
of its requests and the time to first token (`--only-compaction` runs just that).

The machine's other load moves the absolute numbers (the mock, the core, nats-server
and this client share the CPUs); differences within one run move much less.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compaction_cost import CompactionRow, compaction_rows
from request_build import build_ratio

NAMESPACE = "bench"
PREFIX = "ore"
CHUNKS = 50
TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(slots=True)
class Sample:
    """One turn as the client saw it: seconds from sending, and each chunk's lag."""

    started: float
    first: float = 0.0
    done: float = 0.0
    lags: list[float] = field(default_factory=list)
    error: str = ""

    def text(self, content: str, now: float) -> None:
        if not self.first:
            self.first = now - self.started
        # Stamped chunks read "<send time>;"; the filler of a long history is not stamped.
        self.lags += [now - float(s) for s in content.split(";") if s[:1].isdigit()]


Turn = Callable[[str, str], Awaitable[Sample]]
"""`(thread, text) -> Sample`: one turn of one side."""


# --- the two sides -------------------------------------------------------------------------


class Direct:
    """The openai SDK against the mock: the conversation kept by the caller."""

    def __init__(self, base_url: str) -> None:
        import openai

        self.client = openai.AsyncOpenAI(base_url=base_url, api_key="bench", max_retries=0)
        self.histories: dict[str, list[dict[str, Any]]] = {}

    async def turn(self, thread: str, text: str) -> Sample:
        history = self.histories.setdefault(thread, [])
        history.append({"role": "user", "content": text})
        sample = Sample(time.monotonic())
        while True:
            answer, calls = await self._call(history, sample)
            history.append({"role": "assistant", "content": answer or None, **calls})
            if not calls:
                break
            for call in calls["tool_calls"]:
                history.append(
                    {"role": "tool", "tool_call_id": call["id"], "content": "error: unknown tool"}
                )
        sample.done = time.monotonic() - sample.started
        return sample

    async def _call(
        self, history: list[dict[str, Any]], sample: Sample
    ) -> tuple[str, dict[str, Any]]:
        stream = await self.client.chat.completions.create(
            model="mock-model",
            messages=history,  # type: ignore[arg-type]
            stream=True,
            stream_options={"include_usage": True},
        )
        parts: list[str] = []
        calls: list[dict[str, Any]] = []
        async for chunk in stream:
            for choice in chunk.choices:
                delta = choice.delta
                if delta.content:
                    sample.text(delta.content, time.monotonic())
                    parts.append(delta.content)
                for call in delta.tool_calls or ():
                    if call.id:
                        name = call.function.name if call.function else ""
                        function = {"name": name, "arguments": ""}
                        calls.append({"id": call.id, "type": "function", "function": function})
                    elif call.function and call.function.arguments:
                        calls[-1]["function"]["arguments"] += call.function.arguments
        return "".join(parts), {"tool_calls": calls} if calls else {}

    async def close(self) -> None:
        await self.client.close()


class ThroughOre:
    """A raw nats-py client of `ore serve`: JetStream ingress, core-NATS output."""

    def __init__(self, nc: Any) -> None:
        self.nc = nc
        self.js = nc.jetstream()
        self.pending: dict[str, tuple[Sample, asyncio.Future[None]]] = {}
        self.serial = 0

    @classmethod
    async def connect(cls, url: str) -> ThroughOre:
        import nats

        side = cls(await nats.connect(url))
        await side.nc.subscribe(f"{PREFIX}.out.{NAMESPACE}.>", cb=side._on_output)
        await side.nc.flush()
        return side

    async def turn(self, thread: str, text: str) -> Sample:
        self.serial += 1
        event_id = f"m{self.serial}"
        body = orjson.dumps({"kind": "user_message", "id": event_id, "content": text})
        done = asyncio.get_running_loop().create_future()
        sample = Sample(time.monotonic())
        self.pending[thread] = (sample, done)
        await self.js.publish(
            f"{PREFIX}.in.{NAMESPACE}.{thread}",
            body,
            headers={
                "Nats-Msg-Id": f"{thread}:{event_id}",
                "Ore-Kind": "user_message",
                "Ore-Schema": "2",
            },
        )
        await asyncio.wait_for(done, 120)
        return sample

    async def _on_output(self, msg: Any) -> None:
        now = time.monotonic()
        thread = msg.subject.rsplit(".", 1)[1]
        waiting = self.pending.get(thread)
        if waiting is None:
            return
        sample, done = waiting
        event = orjson.loads(msg.data)
        for item in event["events"] if event.get("kind") == "batch" else [event]:
            kind = item.get("kind")
            if kind == "text_delta":
                sample.text(item["content"], now)
            elif kind == "lifecycle" and item.get("phase") == "done":
                sample.done = now - sample.started
                del self.pending[thread]
                done.set_result(None)
            elif kind == "error":  # its `done` follows: the turn is reported failed
                sample.error = str(item.get("message", item))

    async def close(self) -> None:
        await self.nc.close()


# --- phases --------------------------------------------------------------------------------


async def converse(turn: Turn, threads: list[str], per_thread: int, text: str) -> list[Sample]:
    """Every thread sends `per_thread` messages, each once the previous one is answered."""

    async def one(thread: str) -> list[Sample]:
        return [await turn(thread, text) for _ in range(per_thread)]

    results = await asyncio.gather(*(one(thread) for thread in threads))
    samples = [sample for samples in results for sample in samples]
    failed = [sample.error for sample in samples if sample.error]
    if failed:
        raise RuntimeError(f"{len(failed)} of {len(samples)} turns failed, e.g. {failed[0]}")
    return samples


def cpu_seconds(pid: int) -> float:
    """User + system CPU of every thread of `pid` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))] if ordered else 0.0


@dataclass(slots=True)
class Phase:
    """Both sides' samples of one scenario, and the core's CPU per turn through ore."""

    name: str
    direct: list[Sample]
    ore: list[Sample]
    core_cpu: float

    def figure(self, side: str, what: str, share: float) -> float:
        samples: list[Sample] = getattr(self, side)
        if what == "lag":
            return percentile([lag for s in samples for lag in s.lags], share) * 1e3
        return percentile([getattr(s, what) for s in samples], share) * 1e3


async def run_phase(
    name: str,
    direct: Direct,
    ore: ThroughOre,
    core_pid: int,
    threads: int,
    per_thread: int,
    text: str = "hello",
) -> Phase:
    names = [f"{name}{n}" for n in range(threads)]
    await converse(direct.turn, names, 1, text)  # warm-up: connections, new threads
    await converse(ore.turn, names, 1, text)
    measured_direct = await converse(direct.turn, names, per_thread, text)
    before = cpu_seconds(core_pid)
    measured_ore = await converse(ore.turn, names, per_thread, text)
    cpu = (cpu_seconds(core_pid) - before) / len(measured_ore)
    return Phase(name, measured_direct, measured_ore, cpu)


async def long_thread(
    direct: Direct, ore: ThroughOre, core_pid: int, history: int, per_thread: int
) -> Phase:
    """One thread whose history already holds `history` turns (filled at once)."""
    filler = "fill " + "words " * 30
    for _ in range(history // 2):
        await direct.turn("long", filler)
        await ore.turn("long", filler)
    measured_direct = await converse(direct.turn, ["long"], per_thread, "hello")
    before = cpu_seconds(core_pid)
    measured_ore = await converse(ore.turn, ["long"], per_thread, "hello")
    cpu = (cpu_seconds(core_pid) - before) / len(measured_ore)
    return Phase(f"long thread ({history} turns)", measured_direct, measured_ore, cpu)


# --- processes -----------------------------------------------------------------------------


def start_mock() -> tuple[subprocess.Popen[str], str]:
    mock = subprocess.Popen(
        [sys.executable, "-m", "ore_openai.testing", "--chunks", str(CHUNKS)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert mock.stdout is not None
    return mock, mock.stdout.readline().strip()


def start_core(nats_url: str, mock_url: str, tmp: Path) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "ORE_LOAD_PLUGINS": "ore-openai",
        "ORE_PROCESSOR__NAME": "openai",
        "ORE_OPENAI_BASE_URL": mock_url,
        "ORE_STORE__NAME": "sqlite",
        "ORE_STORE__PATH": str(tmp / "ore.db"),
        "ORE_CONFIG": str(tmp / "ore.toml"),
        "XDG_STATE_HOME": str(tmp / "state"),
        "XDG_CONFIG_HOME": str(tmp / "config"),
    }
    (tmp / "ore.toml").write_text("")
    ore = str(Path(sys.executable).with_name("ore"))
    log = (tmp / "ore-serve.log").open("wb")
    return subprocess.Popen([ore, "serve", "--nats", nats_url], env=env, stdout=log, stderr=log)


async def wait_ready(nats_url: str, core: subprocess.Popen[bytes]) -> None:
    import nats

    nc = await nats.connect(nats_url)
    try:
        for _ in range(600):
            if core.poll() is not None:
                raise RuntimeError(f"ore serve exited with {core.returncode}")
            try:
                await nc.request(f"{PREFIX}.admin.health", b"{}", timeout=0.5)
                return
            except Exception:
                await asyncio.sleep(0.1)
        raise RuntimeError("ore serve did not answer its health check")
    finally:
        await nc.close()


def start_profiler(directory: str | None, pid: int) -> subprocess.Popen[bytes] | None:
    """py-spy on `ore serve` for the measured phases (`--profile DIR`)."""
    if not directory:
        return None
    spy = str(Path(sys.executable).with_name("py-spy"))
    out = str(Path(directory) / "ore-serve.txt")
    command = [spy, "record", "-p", str(pid), "-r", "200", "-f", "raw", "-o", out, "--nonblocking"]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL)


# --- report --------------------------------------------------------------------------------


def report_compaction(rows: list[CompactionRow], window: int) -> None:
    print()
    columns = ("request bytes", "first token ms p50", "summaries")
    print(f"| long thread (compaction.context_window = {window}) | {' | '.join(columns)} |")
    print("|---|---|---|---|")
    for row in rows:
        print(f"| {row.name} | {row.request_bytes} | {row.first_token_ms:.1f} | {row.summaries} |")


def report(phases: list[Phase], build_ratio: float, history: int) -> None:
    print("| scenario | measure | direct p50 / p99 ms | ore p50 / p99 ms | ore adds p50 / p99 ms |")
    print("|---|---|---|---|---|")
    for phase in phases:
        for what, label in (("first", "first token"), ("done", "completion"), ("lag", "delta lag")):
            d50, d99 = phase.figure("direct", what, 0.5), phase.figure("direct", what, 0.99)
            o50, o99 = phase.figure("ore", what, 0.5), phase.figure("ore", what, 0.99)
            print(
                f"| {phase.name} | {label} | {d50:.1f} / {d99:.1f} | {o50:.1f} / {o99:.1f} "
                f"| {o50 - d50:+.1f} / {o99 - d99:+.1f} |"
            )
        print(f"| {phase.name} | core CPU per model turn | | {phase.core_cpu * 1e3:.2f} ms | |")
    by_threads = {int(p.name[1:]): p for p in phases if p.name.startswith("c")}
    one, most = by_threads[min(by_threads)], by_threads[max(by_threads)]
    few = f"{one.name[1:]} thread{'s' * (one.name != 'c1')}"

    def adds(phase: Phase, what: str, share: float) -> float:
        return phase.figure("ore", what, share) - phase.figure("direct", what, share)

    goals = [
        (f"first-token overhead, {few}, p50", adds(one, "first", 0.5), 2.0, "ms"),
        (f"first-token overhead, {few}, p99", adds(one, "first", 0.99), 10.0, "ms"),
        (f"first-token overhead, {most.name[1:]} threads, p50", adds(most, "first", 0.5), 10, "ms"),
        (f"completion overhead, {few}, p50", adds(one, "done", 0.5), 5.0, "ms"),
        (f"request build, {history} turns, vs serialising them", build_ratio, 2.0, "x"),
    ]
    print()
    print("| goal | measured | at most | met |")
    print("|---|---|---|---|")
    for label, value, limit, unit in goals:
        met = "yes" if value <= limit else "no"
        print(f"| {label} | {value:.2f} {unit} | {limit:g} {unit} | {met} |")


async def scenarios(
    args: argparse.Namespace, direct: Direct, ore: ThroughOre, core_pid: int
) -> list[Phase]:
    """Each concurrency, then the tool call and the long thread at one thread."""
    phases = []
    for threads in args.concurrency:
        per_thread = args.per_thread if threads == 1 else max(1, args.per_thread // 5)
        phases.append(await run_phase(f"c{threads}", direct, ore, core_pid, threads, per_thread))
    tools = await run_phase("tool", direct, ore, core_pid, 1, args.per_thread, "tool")
    tools.name = "tool call (2 model calls)"
    phases.append(tools)
    phases.append(await long_thread(direct, ore, core_pid, args.history, args.per_thread))
    return phases


async def measure(args: argparse.Namespace, tmp: Path) -> list[Phase]:
    from ore_core.bus.server.durability import SyncPolicy
    from ore_core.bus.server.embedded import EmbeddedNatsServer

    mock, mock_url = start_mock()
    try:
        config = SyncPolicy(args.sync).server_config()
        async with EmbeddedNatsServer(tmp / "nats", config=config) as server:
            core = start_core(server.url, mock_url, tmp)
            try:
                await wait_ready(server.url, core)
                direct = Direct(mock_url)
                ore = await ThroughOre.connect(server.url)
                spy = start_profiler(args.profile, core.pid)
                try:
                    return await scenarios(args, direct, ore, core.pid)
                except BaseException:
                    log = (tmp / "ore-serve.log").read_text().splitlines()
                    print("\n".join(["ore serve's log ends:", *log[-40:]]), file=sys.stderr)
                    raise
                finally:
                    if spy is not None:
                        spy.send_signal(signal.SIGINT)  # py-spy writes what it sampled
                        spy.wait()
                    await ore.close()
                    await direct.close()
            finally:
                core.terminate()
                core.wait(30)
    finally:
        assert mock.stdin is not None
        mock.stdin.close()
        mock.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few turns at 1 and 5 threads")
    parser.add_argument("--concurrency", default="1,50,200", help="comma-separated threads")
    parser.add_argument("--per-thread", type=int, default=20, help="turns at 1 thread")
    parser.add_argument("--history", type=int, default=200, help="turns of the long thread")
    parser.add_argument("--profile", metavar="DIR", help="py-spy `ore serve` into DIR")
    parser.add_argument("--compaction-turns", type=int, default=500, help="turns of that row")
    parser.add_argument("--window", type=int, default=8000, help="its context window")
    parser.add_argument("--only-compaction", action="store_true", help="just that row")
    parser.add_argument(
        "--sync", default="always", help="nats-server fsync policy, as nats.sync (default always)"
    )
    args = parser.parse_args()
    if args.quick:
        args.concurrency, args.per_thread, args.history = "1,5", 2, 10
        args.compaction_turns = 40
    rows = compaction_rows(args.compaction_turns, args.window)
    if args.only_compaction:
        report_compaction(rows, args.window)
        return
    args.concurrency = [int(n) for n in args.concurrency.split(",")]
    with tempfile.TemporaryDirectory(prefix="ore-model-path-") as name:
        phases = asyncio.run(measure(args, Path(name)))
    report(phases, build_ratio(args.history), args.history)
    report_compaction(rows, args.window)


if __name__ == "__main__":
    main()
