"""The repository stands on its own: its license, and no file citing a path outside it.

A reader of the project can open everything it refers to: no file names documents that
live outside the repository (the Go framework's notes, a development machine's
directories), and every relative Markdown link resolves to a file of the checkout.
"""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path

import pytest

from tests.paths import ROOT

LICENSE_ID = "Apache-2.0"

# Spelled in pieces, so this file does not cite what it looks for.
OUTSIDE = re.compile(
    "|".join(
        re.escape(piece)
        for piece in ("DESIGN" + ".md", "ore-" + "behaviour", "../" + "shared", "/" + "work/")
    )
)
_LINK = re.compile(r"\]\(([^)\s]+)\)")
_NOT_A_PATH = ("http://", "https://", "mailto:", "#")


def tracked_files() -> list[Path]:
    """The files git tracks in this checkout (what a clone holds)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode()
    return [ROOT / name for name in listed.split("\0") if name]


def text_of(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except (UnicodeDecodeError, IsADirectoryError, FileNotFoundError):
        return None  # binary, or a submodule / deleted in the worktree


def citations_outside(path: Path, text: str) -> list[str]:
    """`path:line: text` for every line of `text` naming a place outside the repository."""
    return [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for number, line in enumerate(text.splitlines(), 1)
        if OUTSIDE.search(line)
    ]


def links_leaving_the_checkout(path: Path, text: str) -> list[str]:
    """Relative Markdown links of `path` that point outside the checkout or at nothing."""
    wrong = []
    for target in _LINK.findall(text):
        if target.startswith(_NOT_A_PATH):
            continue
        resolved = (path.parent / target.split("#", 1)[0]).resolve()
        if not resolved.is_relative_to(ROOT) or not resolved.exists():
            wrong.append(f"{path.relative_to(ROOT)}: {target}")
    return wrong


def test_no_tracked_file_cites_a_path_outside_the_repository() -> None:
    found = []
    for path in tracked_files():
        text = text_of(path)
        if text is not None and path != Path(__file__).resolve():
            found += citations_outside(path, text)
    assert found == []


def test_every_relative_markdown_link_resolves_inside_the_checkout() -> None:
    found = []
    for path in tracked_files():
        text = text_of(path) if path.suffix == ".md" else None
        if text is not None:
            found += links_leaving_the_checkout(path, text)
    assert found == []


def test_the_license_file_is_the_apache_license_2_0() -> None:
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert text.split()[:4] == ["Apache", "License", "Version", "2.0,"]
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
    assert "END OF TERMS AND CONDITIONS" in text


@pytest.mark.parametrize(
    "pyproject",
    sorted(ROOT.glob("pyproject.toml")) + sorted(ROOT.glob("*/*/pyproject.toml")),
    ids=lambda path: str(path.parent.relative_to(ROOT)),
)
def test_every_distribution_declares_the_license_of_the_license_file(pyproject: Path) -> None:
    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    assert project["license"] == LICENSE_ID
