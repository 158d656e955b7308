"""The pytest kit (`ore_core.testing`) is opt-in: installing ore adds nothing to pytest."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path

PROBE = """
import sys

import pytest


def test_the_kit_is_absent(request):
    assert "ore_core.testing" not in sys.modules
    with pytest.raises(pytest.FixtureLookupError):
        request.getfixturevalue("ore_nats_server")
"""


def _pytest(directory: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """pytest in a fresh interpreter, in a directory of its own (no ore conftest, no ini)."""
    (directory / "pytest.ini").write_text("[pytest]\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        cwd=directory,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_no_installed_distribution_registers_the_kit_as_a_pytest11_plugin() -> None:
    plugins = [ep.value for ep in importlib.metadata.entry_points(group="pytest11")]
    assert [value for value in plugins if value.startswith(("ore_core", "ore_openai"))] == []


def test_a_pytest_run_without_the_opt_in_does_not_load_the_kit(tmp_path: Path) -> None:
    (tmp_path / "test_probe.py").write_text(PROBE)
    run = _pytest(tmp_path, "--trace-config", "-q")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "ore_core" not in run.stdout


def test_the_kit_loads_with_p_and_its_fixtures_are_prefixed(tmp_path: Path) -> None:
    (tmp_path / "test_nothing.py").write_text("def test_nothing():\n    pass\n")
    run = _pytest(tmp_path, "-p", "ore_core.testing", "--fixtures", "-q")
    assert run.returncode == 0, run.stdout + run.stderr
    kit = {"ore_nats_server", "ore_nats_url", "ore_nats_client", "ore_nats_cluster"}
    kit |= {"ore_plugin_manager", "ore_register_plugin", "ore_isolated_env"}
    kit |= {"ore_conduit_core", "ore_start_conduit"}
    listed = {line.split()[0] for line in run.stdout.splitlines() if line.startswith("ore_")}
    assert kit <= listed
    for generic in ("nats_server", "nats_client", "mock_openai", "register_plugin"):
        assert f"\n{generic} " not in run.stdout
