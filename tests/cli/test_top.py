"""`ore top` against two real `ore serve` workers sharing one NATS (issue 33)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from typing import Any

import pytest

from ore_core.bus.server.embedded import EmbeddedNatsServer
from ore_core.cli.top import Board, Snapshot
from ore_core.subjects import Subjects
from tests.cli.test_cli_serve import ORE, Served, client_of, start_serve, wait_until_serving

__all__ = ["client_of", "start_serve"]  # fixtures, imported for pytest

pytestmark = pytest.mark.slow

PARTITIONS = 4
BALANCE_TIMEOUT = 60.0


def ore_top(url: str, *args: str) -> str:
    """`ore top --once ARGS` against `url`: its stdout (a wide terminal: no truncation)."""
    result = subprocess.run(
        [str(ORE), "top", "--once", "--nats", url, *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "200", "ORE_LOAD_PLUGINS": ""},
        check=True,
    )
    return result.stdout


async def balanced(url: str) -> list[dict[str, Any]]:
    """The workers once two answer and each holds some of the partitions (polled)."""
    deadline = time.monotonic() + BALANCE_TIMEOUT
    while True:
        workers = json.loads(await asyncio.to_thread(ore_top, url, "--json"))["workers"]
        held = sorted(p for w in workers for p in w["partitions"])
        shared = len(workers) == 2 and all(w["partitions"] for w in workers)
        if shared and held == list(range(PARTITIONS)):
            return list(workers)
        if time.monotonic() > deadline:
            pytest.fail(f"workers did not share the partitions: {workers}")


async def test_top_shows_both_workers_with_their_partitions(
    ore_nats_server: EmbeddedNatsServer, start_serve: Callable[..., Served], client_of: Any
) -> None:
    nc = await client_of(ore_nats_server.url)
    for _ in range(2):
        served = start_serve("--nats", ore_nats_server.url, "--partitions", str(PARTITIONS))
        await wait_until_serving(nc, served)
    workers = await balanced(ore_nats_server.url)
    table = await asyncio.to_thread(ore_top, ore_nats_server.url)
    rows = [line for line in table.splitlines() if any(w["worker"] in line for w in workers)]
    assert [
        ",".join(map(str, w["partitions"])) in row for w, row in zip(workers, rows, strict=True)
    ] == [True, True]


async def round_until(board: Board, done: Callable[[Snapshot], bool]) -> Snapshot:
    """Rounds of `board` until one's view satisfies `done` (at most a minute of them)."""
    for _ in range(120):
        if done(view := await board.round()):
            return view
    pytest.fail(f"no view as expected: {view}")


async def test_a_worker_that_misses_a_window_stays_in_the_view_marked_stale(
    ore_nats_server: EmbeddedNatsServer, start_serve: Callable[..., Served], client_of: Any
) -> None:
    nc = await client_of(ore_nats_server.url)
    served = [start_serve("--nats", ore_nats_server.url) for _ in range(2)]
    for each in served:
        await wait_until_serving(nc, each)
    paused = served[0].process
    views = []
    async with Board(nc, Subjects(), window=0.5) as board:
        await round_until(board, lambda view: len(view.workers) == 2)  # both answered
        paused.send_signal(signal.SIGSTOP)  # it answers nothing while stopped
        try:
            views.append(await board.round())
        finally:
            paused.send_signal(signal.SIGCONT)
        views.append(  # it answers again
            await round_until(board, lambda view: all("stale" not in w for w in view.workers))
        )
    marks = [
        sorted(("stale" in w, f"-{paused.pid}-" in w["worker"]) for w in view.workers)
        for view in views
    ]
    assert marks == [
        [(False, False), (True, True)],  # the paused worker: its last answer, marked stale
        [(False, False), (False, True)],
    ]


async def test_a_worker_silent_for_longer_than_forget_leaves_the_view(
    ore_nats_server: EmbeddedNatsServer, client_of: Any
) -> None:
    # A stand-in worker that answers the first stats request only (then it is gone);
    # the board's clock is the test's, so "60 s later" takes no time.
    nc = await client_of(ore_nats_server.url)
    answered = 0

    async def answer_once(msg: Any) -> None:
        nonlocal answered
        if not answered:
            answered += 1
            await msg.respond(json.dumps({"worker": "gone-1", "partitions": [0]}).encode())

    await nc.subscribe("ore.admin.stats", cb=answer_once)
    now = [0.0]
    counts = []
    async with Board(nc, Subjects(), window=0.2, forget=60.0, clock=lambda: now[0]) as board:
        await round_until(board, lambda view: len(view.workers) == 1)
        for moment in (59.0, 61.0):
            now[0] = moment
            counts.append([w.get("stale") for w in (await board.round()).workers])
    assert counts == [[59.0], []]
