"""docs/architecture.md is a true map: what it names exists, and no package is left out."""

from __future__ import annotations

import re
from pathlib import Path

import ore_core
from tests.docs.support import DOCS
from tests.project.test_layers import FLOORS

ROOT = DOCS.parent
PAGE = (DOCS / "architecture.md").read_text(encoding="utf-8")
_PATH = re.compile(r"`((?:ore_core|plugins|conduits|tests|docs|bench)/[\w./-]*)`")


def named_paths() -> list[str]:
    """Every repository path the page writes in backticks (`ore_core/bus/egress/egress.py`)."""
    return sorted(set(_PATH.findall(PAGE)))


def packages() -> list[str]:
    """Every package of ore_core, as the page writes it (`ore_core/session/stores/`)."""
    root = Path(ore_core.__file__).parent
    return sorted(
        f"{init.parent.relative_to(root.parent).as_posix()}/"
        for init in root.rglob("__init__.py")
        if "__pycache__" not in init.parts
    )


def test_every_path_the_page_names_exists() -> None:
    assert len(named_paths()) > 100
    assert [path for path in named_paths() if not (ROOT / path).exists()] == []


def test_every_package_of_ore_core_is_named() -> None:
    assert [package for package in packages() if f"`{package}`" not in PAGE] == []


def test_every_floor_of_the_layer_test_is_in_the_floor_table() -> None:
    rows = re.findall(r"^\| (\w+) \|", PAGE, re.M)
    assert [floor for floor in FLOORS if floor not in rows] == []


def test_the_readme_links_the_page() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "(docs/architecture.md)" in readme
