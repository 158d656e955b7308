"""Instructions per turn of `ore serve` under cachegrind: a figure the machine's load does
not move (user space, every thread of the core process).

Run: `python bench/icount.py CODE_DIR PER_THREAD OUT_FILE [STORE]` (needs valgrind).
It starts a private nats-server and `ore serve` from CODE_DIR (a checkout; its
`ore_core` goes first on PYTHONPATH) under cachegrind, warms 100 threads with 2 turns
each through a `ConduitClient`, runs PER_THREAD more turns per thread, stops the core
and prints the total instructions. Run it twice with different PER_THREAD (e.g. 2 and
32) for each code: the difference divided by the extra turns is instructions per turn,
start-up and shutdown left out. Leases get 60 s (everything is ~50x slower under
valgrind). Not part of the test suite.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

THREADS = 100
CORE = "import sys; from ore_core.cli import main; sys.exit(main())"  # `ore`, from PYTHONPATH


async def drive(url: str, core: subprocess.Popen[bytes], per_thread: int) -> None:
    import nats

    from ore_core import ConduitClient

    nc = await nats.connect(url)
    for _ in range(3000):
        if core.poll() is not None:
            raise RuntimeError("ore serve exited")
        try:
            await nc.request("ore.admin.health", b"{}", timeout=1)
            break
        except Exception:
            await asyncio.sleep(0.2)
    await nc.close()
    client = await ConduitClient.connect(url, name="icount")
    feed = await client.events().start()
    waiters: dict[str, asyncio.Future[None]] = {}

    async def read() -> None:
        async for delivery in feed:
            if delivery.kind == "lifecycle" and getattr(delivery.event, "phase", "") == "done":
                waiter = waiters.pop(delivery.thread_id, None)
                if waiter is not None and not waiter.done():
                    waiter.set_result(None)

    reader = asyncio.create_task(read())

    async def converse(thread_id: str, first: int, count: int) -> None:
        for number in range(first, first + count):
            waiter = asyncio.get_running_loop().create_future()
            waiters[thread_id] = waiter
            await client.send(thread_id, "hello", id=f"{thread_id}-{number}")
            await asyncio.wait_for(waiter, 600)

    threads = [f"t{n:03d}" for n in range(THREADS)]
    await asyncio.gather(*(converse(t, 0, 2) for t in threads))
    await asyncio.gather(*(converse(t, 2, per_thread) for t in threads))
    await feed.close()
    reader.cancel()
    await asyncio.gather(reader, return_exceptions=True)
    await client.close()


def main() -> None:
    code, per_thread, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    store = sys.argv[4] if len(sys.argv) > 4 else "sqlite"
    sys.path.insert(0, code)
    from ore_core.bus.server.embedded import EmbeddedNatsServer

    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        (tmp / "ore.toml").write_text("")
        env = {
            **os.environ,
            "PYTHONPATH": code,
            "ORE_LOAD_PLUGINS": "",
            "ORE_STORE__NAME": store,
            "ORE_CONFIG": str(tmp / "ore.toml"),
            "ORE_NATS__LEASE_TTL": "60",
        }
        if store != "memory":
            env["ORE_STORE__PATH"] = str(tmp / "ore.db")
        with EmbeddedNatsServer(tmp / "nats") as server:
            valgrind = ["valgrind", "--tool=cachegrind", "--cache-sim=no"]
            command = [*valgrind, f"--cachegrind-out-file={out}", sys.executable, "-c", CORE]
            with open(out + ".log", "wb") as log:
                core = subprocess.Popen(
                    [*command, "serve", "--nats", server.url],
                    env=env,
                    stdout=log,
                    stderr=log,
                    cwd=tmp,
                )
                try:
                    asyncio.run(drive(server.url, core, per_thread))
                finally:
                    core.send_signal(signal.SIGTERM)
                    core.wait(600)
    found = re.search(r"summary: (\d+)", Path(out).read_text())
    print(per_thread, found.group(1) if found else "no summary")


if __name__ == "__main__":
    main()
