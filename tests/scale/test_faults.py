"""Faults on a 3-node cluster under a fixed-rate load (bench/chaos.py --once, shortened):
nothing lost, doubled, reordered or unanswered, no worker stops by itself, and the nodes
store the same streams after the heal."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.scale.faults import EVERY_KIND, RunResult, fault_run

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


async def run(directory: Path, kinds: list[str], drain: float) -> RunResult:
    return await fault_run(
        directory,
        sync="always",
        seed=1,
        threads=8,
        period=1.0,
        quiet=3.0,
        kinds=kinds,
        duration=0.0,
        gap=2.0,
        hold=3.0,
        drain=drain,
        log=lambda line: None,
    )


def assert_clean(result: RunResult) -> None:
    assert result.sent > 0
    assert result.verdict.clean, (result.verdict, list(result.bad_threads.items())[:5])
    assert result.verdict.ok == result.sent
    assert result.store_report.clean, result.store_report.details[:5]
    assert result.given_up == [], result.given_up
    assert result.nodes_agree, result.node_states
    assert result.stopped_by_themselves == []


NODE_KILLS = ["kill-node", "kill-majority", "kill-all-nodes"]


async def test_pauses_of_a_node_and_a_worker_and_a_worker_kill_lose_nothing(
    tmp_path: Path,
) -> None:
    kinds = [kind for kind in EVERY_KIND if kind not in NODE_KILLS]
    result = await run(tmp_path, kinds, drain=120.0)
    assert [record.kind for record in result.faults] == kinds
    assert_clean(result)


async def test_kill_9_of_one_two_and_all_three_nodes_under_load_loses_nothing(
    tmp_path: Path,
) -> None:
    result = await run(tmp_path, NODE_KILLS, drain=45.0)
    assert_clean(result)
