"""ConduitProcess: `astop` lets the test's loop run while the conduit stops; `start_ready`
ends when the conduit is ready or gone."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from ore_core.testing.conduit_process import ConduitProcess

# Stops on SIGTERM only after the loop that asked has answered it (a file appears):
# a stop that blocked that loop would never see it.
_WAITS_FOR_AN_ANSWER = """
import pathlib, signal, sys, time
answer = pathlib.Path(sys.argv[1])
def stop(*_):
    while not answer.exists():
        time.sleep(0.01)
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
print("ready", flush=True)
time.sleep(600)
"""


def _waiting_for(answer: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-c", _WAITS_FOR_AN_ANSWER, str(answer)], stdout=subprocess.PIPE
    )


async def test_astop_lets_the_loop_answer_the_conduit_while_it_stops(tmp_path: Path) -> None:
    answer = tmp_path / "answered"
    conduit = ConduitProcess("any", "nats://127.0.0.1:1", tmp_path / "log")
    conduit.process = _waiting_for(answer)
    assert conduit.process.stdout is not None
    assert await asyncio.to_thread(conduit.process.stdout.readline) == b"ready\n"

    async def answer_on_the_loop() -> None:
        while conduit.process is not None and conduit.process.poll() is None:
            answer.touch()
            await asyncio.sleep(0.01)

    answering = asyncio.ensure_future(answer_on_the_loop())
    async with asyncio.timeout(60):  # bounds a hang only
        await conduit.astop()
    await answering
    assert conduit.process.returncode == 0  # it stopped politely, not killed after 30 s


async def test_start_ready_fails_at_once_when_the_conduit_exits_before_it_is_ready(
    tmp_path: Path,
) -> None:
    never = asyncio.Event()  # the fake's readiness: never there

    async def wait_until(predicate: Callable[[], bool], within: float) -> None:
        async with asyncio.timeout(within):
            await never.wait()

    conduit = ConduitProcess.isolated("no-such-conduit", "nats://127.0.0.1:1", tmp_path, {})
    async with asyncio.timeout(60):  # bounds a hang only: the wait's own bound is STARTUP
        with pytest.raises(AssertionError, match="exited before it was ready"):
            await conduit.start_ready(lambda: False, wait_until)
    assert conduit.process is not None
    assert conduit.process.wait() != 0
