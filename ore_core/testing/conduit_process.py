"""ConduitProcess: `ore conduit NAME` as a real process, for tests that kill it.

A conduit's promises (every message answered once, in order) must hold when its process
dies at any moment: start it, kill it (`kill -9`), start it again, and count what the
platform shows. Its output goes to `log` (appended across starts).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["ConduitProcess"]


@dataclass
class ConduitProcess:
    """`ore conduit <name> --nats <nats_url> --set KEY=VALUE...` (one per `settings` entry)."""

    name: str
    nats_url: str
    log: Path
    settings: Mapping[str, object] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)  # added to this process's
    process: subprocess.Popen[bytes] | None = None
    starts: int = 0

    def start(self) -> None:
        """Start it (again); it runs until `kill` or `stop`."""
        argv = [str(Path(sys.executable).with_name("ore")), "conduit", self.name]
        argv += ["--nats", self.nats_url]
        for key, value in self.settings.items():
            argv += ["--set", f"{key}={value}"]
        self.starts += 1
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                argv, stdout=log, stderr=log, env={**os.environ, **self.env}
            )

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
