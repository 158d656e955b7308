"""A conduit process for the soak: per-thread numbered messages at a fixed rate, on the SDK.

Run: `python -m tests.scale.counter_conduit --nats URL --ledger FILE --period P T1 T2 ...`
(`CounterConduit` starts, kills and restarts it). Each thread sends "<thread>:<n>"
(event id "<thread>-<n>") every `period` seconds with `ConduitClient.send`, and once
`send` returned (JetStream acknowledged it) appends "<thread> <n>" to the ledger, so the
run knows what was acknowledged although the process dies. Started again after a kill
-9, each thread goes on from its last ledger line + 1: a message acknowledged but not
written down before the kill is sent again with its id, which stores it once. SIGTERM
lets every thread finish the send under way and write it down, then exits.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TextIO

from ore_core.conduit.client import ConduitClient

NAMESPACE = "load"  # the soak's Load listens on ore.out.load.*
_ROOT = Path(__file__).resolve().parents[2]


def read_ledger(path: Path) -> dict[str, int]:
    """thread -> the last number acknowledged (a line cut by a kill is skipped)."""
    sent: dict[str, int] = {}
    if not path.exists():
        return sent
    for line in path.read_text().splitlines():
        thread_id, _, n = line.partition(" ")
        if thread_id and n.isdigit():
            sent[thread_id] = max(sent.get(thread_id, 0), int(n))
    return sent


async def _send_thread(
    client: ConduitClient,
    thread_id: str,
    first: int,
    period: float,
    ledger: TextIO,
    stopping: asyncio.Event,
) -> None:
    n = first
    next_at = time.monotonic()
    while not stopping.is_set():
        await client.send(thread_id, f"{thread_id}:{n}", id=f"{thread_id}-{n}")
        ledger.write(f"{thread_id} {n}\n")
        n += 1
        next_at += period
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stopping.wait(), max(0.0, next_at - time.monotonic()))


async def _main(url: str, ledger_path: Path, period: float, threads: list[str]) -> None:
    start = read_ledger(ledger_path)
    stopping = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stopping.set)
    client = await ConduitClient.connect(url, name=NAMESPACE, send_deadline=600.0)
    try:
        with ledger_path.open("a", buffering=1) as ledger:  # a write per line: kill -9 keeps it
            print("counter conduit sending", flush=True)
            await asyncio.gather(
                *(
                    _send_thread(client, t, start.get(t, 0) + 1, period, ledger, stopping)
                    for t in threads
                )
            )
    finally:
        await client.close()


class CounterConduit:
    """Starts the counter conduit as a process (again after a kill), reads its ledger."""

    def __init__(self, url: str, directory: Path, threads: list[str], period: float) -> None:
        self.url = url
        self.directory = directory
        self.threads = threads
        self.period = period
        self.ledger = directory / "conduit-ledger.txt"
        self.process: subprocess.Popen[bytes] | None = None
        self._starts = 0

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def start(self) -> None:
        self._starts += 1
        log = (self.directory / f"conduit{self._starts}.log").open("wb")
        env = {
            **{k: v for k, v in os.environ.items() if not k.upper().startswith("ORE_")},
            "XDG_CONFIG_HOME": str(self.directory / "conduit-config"),
            "XDG_STATE_HOME": str(self.directory / "conduit-state"),
        }
        args = [sys.executable, "-m", "tests.scale.counter_conduit", "--nats", self.url]
        args += ["--ledger", str(self.ledger), "--period", str(self.period), *self.threads]
        self.process = subprocess.Popen(
            args, cwd=_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
        log.close()

    async def wait_sending(self, limit: float = 120.0) -> None:
        """Until the process says it sends (a loaded machine imports slowly)."""
        deadline = time.monotonic() + limit
        log = self.directory / f"conduit{self._starts}.log"
        while "counter conduit sending" not in log.read_text(errors="replace"):
            if self.process is None or self.process.poll() is not None:
                raise RuntimeError(f"the counter conduit exited:\n{log.read_text()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the counter conduit is not sending:\n{log.read_text()}")
            await asyncio.sleep(0.1)

    def kill(self) -> None:
        """kill -9, reaped, and started again at once."""
        assert self.process is not None
        self.process.kill()
        self.process.wait()
        self.start()

    def stop(self) -> None:
        """SIGTERM: every thread writes down the send under way, then it exits."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def sent(self) -> dict[str, int]:
        return read_ledger(self.ledger)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--nats", required=True)
    parser.add_argument("--ledger", type=Path, required=True)
    parser.add_argument("--period", type=float, default=1.0)
    parser.add_argument("threads", nargs="+")
    args = parser.parse_args()
    asyncio.run(_main(args.nats, args.ledger, args.period, args.threads))


if __name__ == "__main__":
    main()
