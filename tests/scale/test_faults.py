"""One fault of each kind on a 3-node cluster under a fixed-rate load (bench/chaos.py
--once, shortened): nothing lost, doubled, reordered or unanswered, and the nodes store
the same streams after the heal."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.scale.faults import EVERY_KIND, fault_run

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


async def test_one_fault_of_each_kind_loses_doubles_and_reorders_nothing(
    tmp_path: Path,
) -> None:
    result = await fault_run(
        tmp_path,
        sync="always",
        seed=1,
        threads=8,
        period=1.0,
        quiet=3.0,
        kinds=list(EVERY_KIND),
        duration=0.0,
        gap=2.0,
        hold=3.0,
        drain=120.0,
        log=lambda line: None,
    )
    assert [record.kind for record in result.faults] == list(EVERY_KIND)
    assert result.sent > 0
    assert result.verdict.clean, (result.verdict, list(result.bad_threads.items())[:5])
    assert result.verdict.ok == result.sent
    assert result.store_report.clean, result.store_report.details[:5]
    assert result.nodes_agree, result.node_states
