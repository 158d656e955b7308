"""A short soak (bench/soak.py --minutes 1): a fixed rate of conversations, from this
process and from a conduit process, a kill -9 of a worker and one of the conduit (started
again); nothing lost, doubled, reordered or unanswered, nothing given up by JetStream,
and after each kill the backlog is taken up and everything sent before it is answered."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.scale.soak import soak_run

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


async def test_a_short_soak_with_worker_and_conduit_kills_loses_doubles_and_reorders_nothing(
    tmp_path: Path,
) -> None:
    result = await soak_run(
        tmp_path,
        minutes=1.0,
        sync="always",
        seed=1,
        threads=8,
        period=0.5,
        fault_every=25.0,
        sample_every=10.0,
        drain=120.0,
        conduit_threads=4,
        log=lambda line: None,
    )
    killed = [recovery.target.split()[0] for recovery in result.recoveries]
    assert killed[:2] == ["worker", "conduit"]
    assert result.sent > 0
    assert result.verdict.clean, result.verdict
    assert result.verdict.ok == result.sent
    assert result.store_report.clean, result.store_report.details[:5]
    assert result.given_up == []
    for recovery in result.recoveries:
        assert recovery.drain is not None, recovery
        assert recovery.pending_zero is not None, recovery
