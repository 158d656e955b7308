"""Rough edges of the command line a new user met (issue 41, item 11)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from ore_core.cli import main


@pytest.fixture(autouse=True)
def _isolated(ore_isolated_env: Path) -> None:
    """Every test here runs in its own ore state and config directories."""


def ore(*args: str, **env: str) -> Result:
    return CliRunner().invoke(main, list(args), env={"ORE_LOAD_PLUGINS": "", **env})


def test_debug_after_the_subcommand_shows_the_traceback(tmp_path: Path) -> None:
    result = ore("threads", "list", "--debug", ORE_STORE__PATH=str(tmp_path))
    assert result.exit_code == 1
    assert "store.path" in str(result.exception)  # raised, not folded into one line


def test_a_store_path_naming_a_directory_says_so_in_one_line(tmp_path: Path) -> None:
    result = ore("threads", "list", ORE_STORE__PATH=str(tmp_path))
    assert result.exit_code == 1
    assert result.output.splitlines() == [
        f"Error: store.path {tmp_path} is a directory: it names the SQLite database file "
        f"(e.g. {tmp_path / 'threads.db'})"
    ]


def test_uninstall_finds_a_conduit_by_its_short_name() -> None:
    result = ore("uninstall", "telegram")  # no terminal: it asks, so it stops there
    assert result.exit_code == 1
    assert result.output.splitlines() == [
        "Error: ore uninstall asks before removing ore-conduit-telegram, but there is no "
        "terminal to answer: add -y"
    ]
