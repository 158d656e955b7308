"""`ore` as a user runs it: the installed command, in a process of its own."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import IO

ORE = Path(sys.executable).with_name("ore")
READY_TIMEOUT = 60.0  # seconds an `ore` process may take to say it is ready
EXIT_TIMEOUT = 60.0  # and to exit once told to stop


def start_serve_until_ready(log: IO[str], *args: str, **env: str) -> subprocess.Popen[str]:
    """`ore serve --port 0 ARGS` (no plugins, `env` added), its stderr into `log`, returned
    once it printed that it is ready; the caller stops it."""
    process = subprocess.Popen(
        [str(ORE), "serve", "--port", "0", *args],
        env={**os.environ, "ORE_LOAD_PLUGINS": "", **env},
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
    )
    assert process.stdout is not None
    for line in process.stdout:
        if line.startswith("ore core ready"):
            break
    return process


async def ore_at(url: str, home: Path, *args: str) -> tuple[int, str, str]:
    """`ore ARGS` against the NATS at `url`, with no `ORE_*` setting of the test's and
    its own XDG directories under `home`, in the test's loop: (status, stdout, stderr)."""
    env = {
        **{k: v for k, v in os.environ.items() if not k.upper().startswith("ORE_")},
        "ORE_NATS__URL": url,
        "ORE_LOAD_PLUGINS": "",
        "XDG_CONFIG_HOME": str(home / "config"),
        "XDG_STATE_HOME": str(home / "state"),
    }
    process = await asyncio.create_subprocess_exec(
        str(ORE), *args, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    async with asyncio.timeout(EXIT_TIMEOUT):
        out, err = await process.communicate()
    return process.returncode or 0, out.decode(), err.decode()


def run_ore(
    *args: str, plugins: str = "", timeout: float = 120, **env: str
) -> subprocess.CompletedProcess[str]:
    """`ore ARGS` run to its end, loading only `plugins`, with `env` added to the test's
    environment (its own XDG directories); what it printed, as text."""
    return subprocess.run(
        [str(ORE), *args],
        env={**os.environ, "ORE_LOAD_PLUGINS": plugins, **env},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def kill_all(processes: Iterable[subprocess.Popen[str]]) -> None:
    """Kill every process of `processes` still running, and reap it."""
    for process in processes:
        if process.poll() is None:
            process.kill()
            process.wait()
