"""The plugin directory (issue 43): every package of this repository is listed with the
line that installs it, docs/plugins.md is the directory file's page, and
`ore plugins --available` prints the same entries."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from ore_core.cli.directory import DIRECTORY_COMMAND, listings
from tests.cli.conftest import ore
from tests.paths import ROOT

PAGE = ROOT / "docs" / "plugins.md"


@pytest.fixture(autouse=True)
def _isolated(ore_isolated_env: Path) -> None:
    """Every test here runs in its own ore state and config directories."""


def test_the_page_is_the_directory_file_rendered() -> None:
    result = ore("plugins", "--available", "--markdown")
    assert result.exit_code == 0, result.output
    assert PAGE.read_text() == result.stdout, f"docs/plugins.md is out of date: {DIRECTORY_COMMAND}"


def test_every_package_of_this_repository_is_listed_with_its_install_line() -> None:
    packages = {}
    for pyproject in sorted(
        [*ROOT.glob("plugins/*/pyproject.toml"), *ROOT.glob("conduits/*/pyproject.toml")]
    ):
        home = str(pyproject.parent.relative_to(ROOT))
        packages[tomllib.loads(pyproject.read_text())["project"]["name"]] = home
    listed = {entry.name: entry for entry in listings() if not entry.home.startswith("https://")}
    assert {name: entry.home for name, entry in listed.items()} == packages
    assert [entry.install for entry in listed.values()] == [
        f"ore install ./{entry.home}" for entry in listed.values()
    ]


def test_entries_are_in_alphabetical_order_with_unique_names() -> None:
    names = [entry.name for entry in listings()]
    assert names == sorted(set(names))


def test_ore_plugins_available_prints_every_entry() -> None:
    result = ore("plugins", "--available", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == [entry.model_dump() for entry in listings()]
    table = ore("plugins", "--available").stdout.splitlines()
    assert [line.split()[0] for line in table[1:]] == [entry.name for entry in listings()]
