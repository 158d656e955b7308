"""ServeProcess: `ore serve` as a real process on a SQLite store, for tests that kill it.

A conduit's long runs count what users see while the core dies too: `ore serve`
(SQLite store, the echo processor answering `prefix + text` after `delay` seconds, a
stand-in for a model) is killed with SIGKILL by its pid and started again on the same
store and NATS; the restarted one takes the killed one's partitions once their leases
expire (`lease_ttl`). Its output goes to `log` (appended across starts); it gets its own
XDG_STATE_HOME and XDG_CONFIG_HOME and loads no plugins.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ServeProcess"]


@dataclass
class ServeProcess:
    """`ore serve --nats <nats_url> --store sqlite`, its files under `home`."""

    nats_url: str
    home: Path
    prefix: str = "answer to "
    delay: float = 0.05
    lease_ttl: float = 1.5
    process: subprocess.Popen[bytes] | None = None
    starts: int = 0

    @property
    def log(self) -> Path:
        return self.home / "serve.log"

    def answer(self, text: str) -> str:
        """What it answers to `text`."""
        return self.prefix + text

    def start(self) -> None:
        """Start it (again); it runs until `kill` or `stop`."""
        self.home.mkdir(parents=True, exist_ok=True)
        env = {
            **os.environ,
            "ORE_LOAD_PLUGINS": "",
            "ORE_STORE__PATH": str(self.home / "threads.db"),
            "ORE_PROCESSOR__DELAY": str(self.delay),
            "ORE_PROCESSOR__PREFIX": self.prefix,
            "ORE_NATS__LEASE_TTL": str(self.lease_ttl),
            "XDG_STATE_HOME": str(self.home / "state"),
            "XDG_CONFIG_HOME": str(self.home / "config"),
        }
        argv = [str(Path(sys.executable).with_name("ore")), "serve"]
        argv += ["--nats", self.nats_url, "--store", "sqlite"]
        self.starts += 1
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(argv, stdout=log, stderr=log, env=env)

    def kill(self) -> None:
        """kill -9, and wait for it to be gone."""
        assert self.process is not None, "start() it first"
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(30)

    def restart(self) -> None:
        """kill -9, then start again."""
        self.kill()
        self.start()

    async def astop(self) -> None:
        """SIGTERM (kill -9 after 30 s), waited for in a thread; nothing if not running."""
        await asyncio.to_thread(self.stop)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
