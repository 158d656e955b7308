"""kill -9 of a conduit whose platform takes no idempotency keys, in the middle of an
answer (issue 36): the engine's answer record (`PartClaims`) makes the restarted conduit
show the answer once. The conduit is a process (`tests.conduit.keyless_conduit`) killed
by its pid while its platform holds the second part's post; its platform is a file of
posts, counted. The core runs in the test on a real nats-server."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from ore_core.conduit.relay import split_message
from ore_core.testing.conduit_conformance import ConduitCore
from tests.conduit.keyless_conduit import LENGTH
from tests.paths import ROOT

pytestmark = pytest.mark.slow

ROOM = "room-1"
LONG = " ".join(f"word{n}" for n in range(30))  # its echo is four parts
PATIENCE = 60.0


def lines(log: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


async def until_logged(log: Path, done: Callable[[dict[str, object]], bool]) -> None:
    """Until the platform's file holds a line `done` accepts (polled: another process)."""
    for _ in range(int(PATIENCE / 0.05)):
        if any(done(line) for line in lines(log)):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"not logged in {PATIENCE}s: {lines(log)}")


def start(core: ConduitCore, tmp_path: Path, log: Path, hold: int) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "XDG_STATE_HOME": str(tmp_path / "state"),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
    }
    command = [sys.executable, "-m", "tests.conduit.keyless_conduit", core.nats_url, str(log)]
    with (tmp_path / "conduit.log").open("ab") as out:
        return subprocess.Popen(
            [*command, str(hold)], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT
        )


async def test_kill_9_in_the_middle_of_an_answer_shows_each_part_once(
    ore_conduit_core: ConduitCore, tmp_path: Path
) -> None:
    log = tmp_path / "platform.jsonl"
    memo = ore_conduit_core.client_for("memo")
    thread_id, _ = await memo.lookup_or_create("memo.room", ROOM)
    conduit = start(ore_conduit_core, tmp_path, log, hold=2)
    try:
        await until_logged(log, lambda line: line["op"] == "connected")
        await ore_conduit_core.converse(thread_id, LONG, provenance="memo")
        await until_logged(log, lambda line: line["op"] == "held")
        conduit.send_signal(signal.SIGKILL)
        conduit.wait()
        conduit = start(ore_conduit_core, tmp_path, log, hold=0)
        await ore_conduit_core.converse(thread_id, "x", provenance="memo")
        await until_logged(log, lambda line: line.get("text") == "echo: x")
    finally:
        conduit.send_signal(signal.SIGKILL)
        conduit.wait()
    posted = Counter(str(line["text"]) for line in lines(log) if line["op"] == "post")
    parts = split_message(f"echo: {LONG}", LENGTH)
    assert len(parts) > 2  # the kill came between two parts, before the last
    assert posted == Counter([*parts, "echo: x"])
