"""ConduitProcess: `ore conduit NAME` as a real process, for tests that kill it.

A conduit's promises (every message answered once, in order) must hold when its process
dies at any moment: start it, kill it (`kill -9`), start it again, and count what the
platform shows. Its output goes to `log` (appended across starts). With `health_port`
it serves `/metrics` there (`ore conduit --health-port`), which `metrics()` scrapes.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

__all__ = ["STARTUP", "ConduitProcess", "Samples", "free_port"]

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]
"""Every sample of a `/metrics` page: (name, sorted labels) -> value."""
_SCRAPES = 600  # of /metrics at most in `metrics_when`, 50 ms apart
STARTUP = 300.0
"""Seconds a started process may take to be ready at most: a bound against a hang, not a
pace (the wait ends when it is ready); a loaded machine may take a minute to start one."""

WaitUntil = Callable[[Callable[[], bool], float], Awaitable[None]]
"""A fake's `wait_until(predicate, within)`: until `predicate()` holds, checked on its
changes; TimeoutError after `within` seconds."""


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (for a `health_port`)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class ConduitProcess:
    """`ore conduit <name> --nats <nats_url> --set KEY=VALUE...` (one per `settings` entry)."""

    name: str
    nats_url: str
    log: Path
    settings: Mapping[str, object] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)  # added to this process's
    health_port: int | None = None  # `--health-port`: /healthz, /readyz and /metrics
    process: subprocess.Popen[bytes] | None = None
    starts: int = 0

    @classmethod
    def isolated(
        cls,
        name: str,
        nats_url: str,
        tmp_path: Path,
        settings: Mapping[str, object],
        *,
        health_port: int | None = None,
    ) -> ConduitProcess:
        """`ore conduit NAME` with only its own plugin (`ore-conduit-NAME`) loaded, its
        state and config directories and its log (`NAME.log`) under `tmp_path`."""
        env = {
            "ORE_LOAD_PLUGINS": f"ore-conduit-{name}",
            "XDG_STATE_HOME": str(tmp_path / name / "state"),
            "XDG_CONFIG_HOME": str(tmp_path / name / "config"),
        }
        log = tmp_path / f"{name}.log"
        return cls(name, nats_url, log, settings, env=env, health_port=health_port)

    def start(self) -> None:
        """Start it (again); it runs until `kill` or `stop`."""
        argv = [str(Path(sys.executable).with_name("ore")), "conduit", self.name]
        argv += ["--nats", self.nats_url]
        if self.health_port is not None:
            argv += ["--health-port", str(self.health_port)]
        for key, value in self.settings.items():
            argv += ["--set", f"{key}={value}"]
        self.starts += 1
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                argv, stdout=log, stderr=log, env={**os.environ, **self.env}
            )

    async def start_ready(
        self, ready: Callable[[], bool], wait_until: WaitUntil, within: float = STARTUP
    ) -> None:
        """Start it and wait until the platform's fake says it is `ready()` (its
        `wait_until`); AssertionError with its log's end if it exits first."""
        self.start()
        assert self.process is not None
        loop = asyncio.get_running_loop()
        exited = asyncio.Event()
        pidfd = os.pidfd_open(self.process.pid)  # readable once the process exits
        loop.add_reader(pidfd, exited.set)
        readied = asyncio.ensure_future(wait_until(ready, within))
        gone = asyncio.ensure_future(exited.wait())
        try:
            await asyncio.wait([readied, gone], return_when=asyncio.FIRST_COMPLETED)
        finally:
            loop.remove_reader(pidfd)
            os.close(pidfd)
            for wait in (readied, gone):
                wait.cancel()
            await asyncio.gather(readied, gone, return_exceptions=True)
        if readied.cancelled():
            tail = self.log.read_text(errors="replace")[-2000:]
            raise AssertionError(f"{self.name} exited before it was ready: {tail}")
        readied.result()  # TimeoutError: it never got ready

    def kill(self) -> None:
        """kill -9, and wait for it to be gone."""
        assert self.process is not None, "start() it first"
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(30)

    async def astop(self) -> None:
        """`stop` from a coroutine: waits in a thread, so the test's loop runs meanwhile.

        A conduit stopping politely finishes its calls to the core and the platform; when
        they run on the test's loop (an in-process core, a fake platform), a `stop` that
        blocked the loop would make it wait out their timeouts first.
        """
        await asyncio.to_thread(self.stop)

    def stop(self) -> None:
        """SIGTERM (kill -9 after 30 s); nothing if it is not running. Blocks: from a
        test whose loop serves the conduit, use `astop`."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    async def metrics(self) -> Samples:
        """The samples of its `/metrics` (it needs `health_port`), read in a thread."""
        assert self.health_port is not None, "give it a health_port first"
        url = f"http://127.0.0.1:{self.health_port}/metrics"

        def scrape() -> Samples:
            with urllib.request.urlopen(url, timeout=5) as answer:
                text = answer.read().decode()
            return {
                (sample.name, tuple(sorted(sample.labels.items()))): sample.value
                for family in text_string_to_metric_families(text)
                for sample in family.samples
            }

        return await asyncio.to_thread(scrape)

    async def metrics_when(self, wanted: Callable[[Samples], bool]) -> Samples:
        """Its samples once `wanted` holds: a count moves just after the platform shows
        what it counts, so `/metrics` is read again (50 ms apart, 30 s at most) until
        then; AssertionError with the last samples if it never does."""
        samples: Samples = {}
        for _ in range(_SCRAPES):
            samples = await self.metrics()
            if wanted(samples):
                return samples
            await asyncio.sleep(0.05)
        raise AssertionError(f"{self.name}'s metrics never showed what was wanted: {samples}")
