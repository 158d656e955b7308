"""The install lines in the READMEs and guides work from a checkout (issue 28, items 12, 13).

None of ore's packages is on PyPI: a page that says `pip install ore-...` sends the
reader to a package that does not exist.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.paths import ROOT

PAGES = sorted(
    [ROOT / "README.md", *ROOT.glob("docs/*.md"), *ROOT.glob("*/*/README.md")],
    key=str,
)
CONDUITS = sorted(path.name for path in (ROOT / "conduits").iterdir() if path.is_dir())


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_no_page_installs_an_ore_package_from_pypi(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    assert re.findall(r"pip install '?ore-[\w\-\[\]]+", text) == []


@pytest.mark.parametrize("conduit", CONDUITS)
def test_each_conduit_readme_installs_it_from_the_checkout(conduit: str) -> None:
    text = (ROOT / "conduits" / conduit / "README.md").read_text(encoding="utf-8")
    if conduit == "stdin":  # installed with ore itself by the README's quick start
        assert f"./conduits/{conduit}" in (ROOT / "README.md").read_text(encoding="utf-8")
    else:
        assert f"ore install ./conduits/{conduit}" in text


def test_the_slack_quick_start_runs_the_conduit_without_a_nats_flag() -> None:
    text = (ROOT / "conduits" / "slack" / "README.md").read_text(encoding="utf-8")
    quick_start = text.split("```\n", 2)[1]
    assert "ore conduit slack  " in quick_start
    assert "--nats" not in quick_start


def test_the_readme_says_the_nats_server_of_ore_chat_is_a_child_process() -> None:
    text = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    assert "runs everything in one process" not in text
    assert "a private NATS server as its child process" in text
