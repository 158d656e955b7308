"""Fixtures of the scale-out tests: pools of real `ore serve` workers on one NATS."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ore_core.bus.server.embedded import EmbeddedNatsServer
from tests.scale.harness import Workers

PoolFactory = Callable[..., Workers]


@pytest.fixture
def start_workers(ore_nats_server: EmbeddedNatsServer, tmp_path: Path) -> Iterator[PoolFactory]:
    """`start_workers(partitions, delay, env)`: a pool of workers on the test's nats-server
    (each answer `delay` seconds long, `env` added to theirs); all stopped after the test."""
    pools: list[Workers] = []

    def start(partitions: int, delay: float, env: dict[str, str] | None = None) -> Workers:
        url = ore_nats_server.url
        pool = Workers([url], tmp_path, delay=delay, partitions=partitions, env=env)
        pools.append(pool)
        return pool

    yield start
    for pool in pools:
        pool.stop_all()
