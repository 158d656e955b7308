"""bench/model_path.py still runs: its quickest mode completes and prints the goals table.

A benchmark is not a test (nothing here asserts a time); this keeps it from rotting.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[3] / "bench" / "model_path.py"


@pytest.mark.slow  # starts nats-server, the mock and `ore serve`
@pytest.mark.timeout(900)
def test_the_model_path_bench_prints_its_goals_table(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "XDG_STATE_HOME": str(tmp_path / "state"),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
    }
    done = subprocess.run(
        [sys.executable, str(BENCH), "--quick"],
        env=env,
        capture_output=True,
        text=True,
        timeout=850,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "| goal | measured | at most | met |" in done.stdout
    assert "first-token overhead, 1 thread, p50" in done.stdout
