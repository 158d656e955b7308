"""The capability matrix (issue 43): docs/conduits.md is what the conduits of this repository
declare, and `ore conduit --list --capabilities` prints the same rows."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import pytest

from ore_core.cli.capabilities import PAGE_COMMAND, capability_rows
from ore_core.conduit import Capabilities, Conduit
from tests.cli.conftest import ore
from tests.paths import DOCS

PAGE = DOCS / "conduits.md"


@pytest.fixture(autouse=True)
def _isolated(ore_isolated_env: Path) -> None:
    """Every test here runs in its own ore state and config directories."""


def test_the_page_matches_the_declared_capabilities_of_this_repositorys_conduits() -> None:
    result = ore("conduit", "--list", "--capabilities", "--markdown")
    assert result.exit_code == 0, result.output
    assert PAGE.read_text() == result.stdout, f"docs/conduits.md is out of date: {PAGE_COMMAND}"


def test_the_listing_prints_the_rows_of_the_page() -> None:
    listed = ore("conduit", "--list", "--capabilities")
    assert listed.exit_code == 0, listed.output
    table = [line.split() for line in listed.stdout.splitlines()]
    page = [
        [cell.strip().strip("`") for cell in line.strip("|").split("|")]
        for line in PAGE.read_text().splitlines()
        if line.startswith("| ")
    ]
    # the page's cells, split where the terminal's columns are ("nats (defaults)" is two)
    assert [" ".join(row).split() for row in page[1:]] == [
        row
        for row in table[1:]
        if row[0] != "ore-test"  # the test venv's extra conduit
    ]
    assert table[0] == page[0]


class Quiet(Conduit):
    name = "quiet"


class Loud(Conduit):
    name = "loud"
    capabilities: ClassVar[Capabilities] = Capabilities(edit=True, max_message_length=100)


def test_a_conduit_that_declares_nothing_is_shown_with_the_defaults_and_says_so() -> None:
    header, loud, quiet = capability_rows({"quiet": Quiet, "loud": Loud})
    assert header == ("conduit", *Capabilities.model_fields)
    assert quiet[0] == "quiet (defaults)"
    assert dict(zip(header, quiet, strict=True))["edit"] == "no"
    assert dict(zip(header, loud, strict=True))["edit"] == "yes"
    assert (loud[0], dict(zip(header, loud, strict=True))["max_message_length"]) == ("loud", "100")
