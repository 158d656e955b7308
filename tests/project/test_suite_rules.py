"""Rules the root conftest keeps for the whole suite (issue 28, items 4 and 6).

No test touches the user's ore state or configuration: every test has its own
XDG_STATE_HOME / XDG_CONFIG_HOME, and the session's ones point at a sentinel directory
that must stay empty. No test depends on timing: Hypothesis runs without deadlines.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.ore_process import ORE


def test_every_test_has_its_own_state_and_config_directories(tmp_path: Path) -> None:
    for variable in ("XDG_STATE_HOME", "XDG_CONFIG_HOME"):
        assert Path(os.environ[variable]).is_relative_to(tmp_path)


def test_the_callers_ore_variables_do_not_reach_a_test() -> None:
    assert [name for name in os.environ if name.upper().startswith("ORE_")] == []


@pytest.mark.slow
def test_an_ore_process_started_with_the_callers_environment_leaves_the_user_dirs_alone(
    tmp_path: Path, user_dirs_sentinel: Path
) -> None:
    # `ore threads list` opens (and so creates) the default store in the state directory.
    subprocess.run(
        [str(ORE), "threads", "list"],
        env={**os.environ, "ORE_LOAD_PLUGINS": ""},
        capture_output=True,
        check=True,
        timeout=60,
    )
    assert (Path(os.environ["XDG_STATE_HOME"]) / "ore" / "threads.db").exists()
    assert list(user_dirs_sentinel.rglob("*")) == []


def test_hypothesis_runs_without_a_deadline() -> None:
    assert settings().deadline is None


@given(st.integers())
def test_a_property_test_without_settings_of_its_own_has_no_deadline(number: int) -> None:
    assert settings().deadline is None
