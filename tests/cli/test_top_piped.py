"""`ore top --once` piped prints whole rows: no cut at a width nobody chose (issue 41)."""

from __future__ import annotations

import io

from ore_core.cli.top import Snapshot, print_snapshot

LONG_WORKER = "worker-" + "x" * 90


def test_a_piped_snapshot_keeps_a_long_worker_name_whole() -> None:
    worker = {
        "worker": LONG_WORKER,
        "partitions": [0, 1, 2, 3],
        "in_flight": 0,
        "completed": 3,
        "uptime": 1.0,
        "latency_buckets": [],
        "failed": 0,
        "dead_lettered": 0,
    }
    piped = io.StringIO()  # not a terminal, as a pipe is not
    print_snapshot(Snapshot(workers=[worker], dead_letters={}), piped)
    assert any(LONG_WORKER in line for line in piped.getvalue().splitlines())
