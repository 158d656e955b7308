"""What the web conduit costs per open event stream, against a plain SSE forwarder.

Run: `python bench/web.py [--streams N] [--deltas N]`.

One embedded nats-server and an in-process core whose model answers with `--deltas`
text deltas, each carrying the time it was made. Two servers read the same output:
  web conduit   `ore conduit web` as its own process (auth off, loopback)
  plain SSE     a child process that subscribes `ore.out.web.*` with nats-py and writes
                every message it gets to the event streams of that thread, unparsed
For each, two shapes: N threads with one stream each, and one thread with N streams.
Reported per server and shape: RSS growth per open stream, CPU seconds of the server
process per stream while the answers streamed, and delta latency (made in the core ->
read by the client, p50/p99; the core's delta pacing, 0.1 s by default, is in both).
Absolute numbers on a shared machine are noise; compare the two columns of one run.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx

from ore_core import Manager, TurnContext
from ore_core.artifacts import Artifact, TextDelta
from ore_core.bus.server.embedded import EmbeddedNatsServer
from ore_core.bus.server.streams import BusConfig
from ore_core.bus.service import CoreService
from ore_core.session.stores.memory import MemoryStore

_MARK = re.compile(r"@(\d{19})@")
_PLAIN = r"""
import asyncio, sys
import nats, uvicorn
from starlette.applications import Starlette
from starlette.responses import StreamingResponse
from starlette.routing import Route

queues = {}

async def events(request):
    thread = request.path_params["thread"]
    queue = asyncio.Queue()
    queues.setdefault(thread, set()).add(queue)
    async def body():
        try:
            yield b": open\n\n"
            while True:
                data = await queue.get()
                yield b"data: " + data + b"\n\n"
        finally:
            queues[thread].discard(queue)
    return StreamingResponse(body(), media_type="text/event-stream")

async def main():
    nc = await nats.connect(sys.argv[1])
    async def on_message(msg):
        for queue in queues.get(msg.subject.rsplit(".", 1)[1], ()):
            queue.put_nowait(msg.data.replace(b"\n", b" "))
    await nc.subscribe("ore.out.web.*", cb=on_message)
    app = Starlette(routes=[Route("/events/{thread}", events)])
    config = uvicorn.Config(app, host="127.0.0.1", port=int(sys.argv[2]), log_level="warning")
    await uvicorn.Server(config).serve()

asyncio.run(main())
"""


class TimedModel:
    """Answers with `deltas` text deltas, each carrying the time it was made."""

    def __init__(self, deltas: int) -> None:
        self.deltas = deltas

    async def __call__(self, ctx: TurnContext) -> None:
        await ctx.step(self._stream())

    async def _stream(self) -> AsyncIterator[Artifact]:
        for _ in range(self.deltas):
            yield TextDelta(f"@{time.time_ns()}@ ")
            await asyncio.sleep(0.05)


def _rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def _cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def _wait_http(url: str) -> None:
    """Until `url` answers (its headers: an event stream's body never ends)."""
    async with httpx.AsyncClient() as client:
        for _ in range(1200):
            try:
                async with client.stream("GET", url):
                    return
            except httpx.TransportError:
                await asyncio.sleep(0.05)
    raise RuntimeError(f"{url} did not answer")


_STORED = re.compile(r'"kind": ?"(text|turn_complete)"')
_DONE = re.compile(r'"phase": ?"done"')


async def _read(
    client: httpx.AsyncClient,
    url: str,
    opened: asyncio.Event,
    latencies: list[float],
    counter: list[int],
) -> None:
    """Read one stream until its answer is done; the latency of every delta's mark."""
    async with client.stream("GET", url) as response:
        counter[0] += 1
        if counter[0] == counter[1]:
            opened.set()
        async for line in response.aiter_lines():
            if not line.startswith("data:"):
                continue
            now = time.time_ns()
            if not _STORED.search(line):  # the stored answer repeats every mark
                latencies.extend((now - int(mark)) / 1e6 for mark in _MARK.findall(line))
            if _DONE.search(line):
                return


async def _run_shape(
    server: str, base: str, pid: int, threads: list[str], streams: int, deltas: int, send: object
) -> dict[str, float]:
    urls = [
        f"{base}/api/threads/{threads[i % len(threads)]}/events"
        if server == "web"
        else f"{base}/events/{threads[i % len(threads)]}"
        for i in range(streams)
    ]
    latencies: list[float] = []
    opened = asyncio.Event()
    counter = [0, streams]
    limits = httpx.Limits(max_connections=streams + 10)
    before_rss = _rss(pid)
    async with httpx.AsyncClient(timeout=120, limits=limits) as client:
        readers = [asyncio.create_task(_read(client, u, opened, latencies, counter)) for u in urls]
        await opened.wait()
        await asyncio.sleep(0.5)  # let the server settle its per-stream state
        open_rss = _rss(pid)
        cpu = _cpu(pid)
        await send(threads)  # type: ignore[operator]
        await asyncio.gather(*readers)
        cpu = _cpu(pid) - cpu
    latencies.sort()
    return {
        "rss_per_stream_kib": (open_rss - before_rss) / streams / 1024,
        "cpu_ms_per_stream": cpu * 1000 / streams,
        "p50_ms": statistics.median(latencies),
        "p99_ms": latencies[int(len(latencies) * 0.99) - 1],
        "deltas_read": len(latencies),
    }


async def main(streams: int, deltas: int) -> None:
    directory = Path(tempfile.mkdtemp(prefix="ore-bench-web-"))
    nats_server = EmbeddedNatsServer(directory / "nats")
    nats_server.start()
    service = CoreService(
        Manager(MemoryStore(), TimedModel(deltas)),
        servers=[nats_server.url],
        config=BusConfig(partitions=4),
    )
    await service.start()
    web_port, plain_port = _free_port(), _free_port()
    env = {
        **os.environ,
        "XDG_STATE_HOME": str(directory / "state"),
        "XDG_CONFIG_HOME": str(directory / "config"),
    }
    ore = str(Path(sys.executable).with_name("ore"))
    web = await asyncio.create_subprocess_exec(
        *[
            ore,
            "conduit",
            "web",
            "--nats",
            nats_server.url,
            "--set",
            f"port={web_port}",
            "--set",
            "auth=false",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    plain = await asyncio.create_subprocess_exec(
        *[sys.executable, "-c", _PLAIN, nats_server.url, str(plain_port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    web_base, plain_base = f"http://127.0.0.1:{web_port}", f"http://127.0.0.1:{plain_port}"
    try:
        await _wait_http(web_base + "/healthz")
        await _wait_http(plain_base + "/events/x")
        async with httpx.AsyncClient(base_url=web_base, timeout=60) as api:
            many = [(await api.post("/api/threads", json={})).json()["id"] for _ in range(streams)]
            one = [(await api.post("/api/threads", json={})).json()["id"]]

            async def send(threads: list[str]) -> None:
                await asyncio.gather(
                    *(api.post(f"/api/threads/{t}/messages", json={"text": "go"}) for t in threads)
                )

            print(
                f"{streams} streams, {deltas} deltas per answer "
                f"(server RSS per stream, server CPU per stream, delta latency)"
            )
            for shape, threads in (
                (f"{streams} threads x 1 stream", many),
                (f"1 thread x {streams} streams", one),
            ):
                for server, base, pid in (
                    ("web", web_base, web.pid),
                    ("plain", plain_base, plain.pid),
                ):
                    result = await _run_shape(server, base, pid, threads, streams, deltas, send)
                    print(
                        f"  {shape:28} {server:6} rss {result['rss_per_stream_kib']:7.1f} KiB"
                        f"  cpu {result['cpu_ms_per_stream']:6.2f} ms"
                        f"  p50 {result['p50_ms']:7.1f} ms  p99 {result['p99_ms']:7.1f} ms"
                        f"  ({result['deltas_read']:.0f} deltas)"
                    )
    finally:
        for process in (web, plain):
            process.terminate()
            await process.wait()
        await service.stop(grace=0)
        nats_server.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=200)
    parser.add_argument("--deltas", type=int, default=10)
    options = parser.parse_args()
    asyncio.run(main(options.streams, options.deltas))
