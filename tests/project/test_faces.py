"""A lazy face names each public name twice: once for type checkers (an import under
`TYPE_CHECKING`) and once for the run time (`_EXPORTS`, name -> module). These tests
tie the two, so a name added, moved or renamed in one place and not the other fails."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

LAZY_FACES = [
    "ore_core",
    "ore_core.conduit",
    "ore_core.ledger",
    "ore_core.plugins",
    "ore_core.session",
    "ore_core.session.stores",
]


def type_checking_imports(package: str) -> dict[str, str]:
    """Name -> module of the imports under `if TYPE_CHECKING:` in `package`'s face."""
    source = Path(importlib.import_module(package).__file__ or "").read_text(encoding="utf-8")
    names: dict[str, str] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for statement in node.body:
                assert isinstance(statement, ast.ImportFrom), ast.unparse(statement)
                for alias in statement.names:
                    names[alias.asname or alias.name] = statement.module or ""
    return names


@pytest.mark.parametrize("package", LAZY_FACES)
def test_a_face_imports_for_type_checkers_what_it_loads_at_run_time(package: str) -> None:
    assert type_checking_imports(package) == importlib.import_module(package)._EXPORTS


@pytest.mark.parametrize("package", LAZY_FACES)
def test_a_face_exports_every_name_it_loads_and_no_other(package: str) -> None:
    face = importlib.import_module(package)
    assert sorted(face.__all__) == sorted(face._EXPORTS)


def test_the_type_checking_imports_are_read_from_the_face() -> None:
    assert type_checking_imports("ore_core.session.stores")["MemoryStore"] == (
        "ore_core.session.stores.memory"
    )


def public_definitions(module: str) -> list[str]:
    """The names `module` defines at its top level (classes, functions, assignments),
    leaving out private ones and what it imports."""
    source = Path(importlib.import_module(module).__file__ or "").read_text(encoding="utf-8")
    names = []
    for node in ast.parse(source).body:
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            names.append(node.name)
        elif isinstance(node, ast.Assign):
            names.extend(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.append(node.target.id)
    return [name for name in names if not name.startswith("_")]


def test_the_artifacts_face_exports_every_public_name_of_its_kinds() -> None:
    import ore_core.artifacts

    defined = public_definitions("ore_core.artifacts.kinds")
    assert "TextDelta" in defined
    assert sorted(set(defined) - set(ore_core.artifacts.__all__)) == []
