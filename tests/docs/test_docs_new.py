"""The guides start from `ore new` (issue 43): what they show it print and write is what
it prints and writes, and the interceptor guide's edit applies to the generated file."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from ore_core.cli import main
from ore_core.scaffold import PluginNames, plan
from tests.docs.support import DOCS

GUIDES = [
    ("writing-an-interceptor.md", "interceptor", "no-shouting"),
    ("writing-a-turn-processor.md", "processor", "parrot"),
    ("writing-a-store.md", "store", "folder"),
    ("writing-a-conduit.md", "conduit", "room"),
    ("writing-a-sink.md", "sink", "audit"),
]


@pytest.fixture(autouse=True)
def _isolated(ore_isolated_env: Path) -> None:
    """Every test here runs in its own ore state and config directories."""


@pytest.mark.parametrize(("page", "kind", "name"), GUIDES)
def test_the_guide_shows_what_ore_new_prints(
    page: str, kind: str, name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["new", kind, name, "--yes"])
    assert result.exit_code == 0, result.output
    shown = f"$ ore new {kind} {name} --yes\n{result.stdout}"
    assert shown in (DOCS / page).read_text()


@pytest.mark.parametrize(("page", "kind", "name"), GUIDES)
def test_the_guide_lists_every_file_ore_new_writes(page: str, kind: str, name: str) -> None:
    tree = (DOCS / page).read_text().split(f"ore-{name}/\n", 1)[1].split("```")[0]
    listed = set(re.findall(r"^  (\S+)", tree, re.M))
    assert listed == {str(path) for path in plan(kind, PluginNames.of(name))}


def test_the_interceptor_guides_edit_keeps_the_lines_of_the_generated_file() -> None:
    text = (DOCS / "writing-an-interceptor.md").read_text()
    diff = text.split("```diff\n", 1)[1].split("```", 1)[0]
    kept = [line[1:] for line in diff.splitlines() if line.startswith(" ")]
    generated = plan("interceptor", PluginNames.of("no-shouting"))
    source = next(text for path, text in generated.items() if path.name == "plugin.py")
    lines = source.splitlines()
    positions = [lines.index(line) for line in kept]
    assert positions == sorted(positions)
