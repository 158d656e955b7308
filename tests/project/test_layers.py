"""The floors of ore_core: importing a floor loads nothing above it.

What each floor holds and why they are in this order: docs/architecture.md, "The
floors" (keep that page's table in step with `FLOORS` and `MAY_LOAD`; its "The rooms
of the bus" with `ROOMS` and `ROOM_MAY_IMPORT`). Each test imports
every module of one floor in a fresh interpreter and lists what got loaded: a module
of a higher floor among them (through an import or a package `__init__` that loads
its siblings) fails the test, naming it.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

import ore_core
from tests.project.import_support import modules_after

MAX_CONFIG_MODULES = 14
"""Reviewed: 12, plus two for `[files]` (issue 39): its defaults are the files policy's,
which names sizes as an attachment does (`ore_core.files.policy` -> the artifacts)."""

FLOORS: dict[str, tuple[str, ...]] = {
    # The hook contract (`hookimpl`, the hookspecs) imports nothing of ore: any floor may
    # implement a hook, as the bus does for its JetStream store.
    "vocabulary": (
        "ore_core",
        "ore_core.version",
        "ore_core.errors",
        "ore_core.jsonutil",
        "ore_core.ids",
        "ore_core.id_prefix",
        "ore_core.tasks",
        "ore_core.artifacts.*",
        "ore_core.turn",
        "ore_core.subjects",
        "ore_core.endpoint",
        "ore_core.events",
        "ore_core.tracing",  # spans on every floor's hops; OpenTelemetry only once enabled
        "ore_core.plugins",
        "ore_core.plugins.hookspecs",
        "ore_core.files",  # a lazy face
        "ore_core.files.policy",  # which files are taken: the settings read its defaults
        "ore_core.files.reading",  # how a processor reads a file (a protocol)
    ),
    "ledger": ("ore_core.ledger.*",),
    "session": ("ore_core.session.*",),
    "config": (
        "ore_core.config",
        "ore_core.config_reference",
        "ore_core.logging",
        "ore_core.store_options",
    ),
    "sdk": ("ore_core.conduit.*", "ore_core._nats.*", "ore_core.files.*"),
    "bus": ("ore_core.bus.*", "ore_core.bridge.*"),
    "plugins": ("ore_core.plugins.*", "ore_core.files.interceptor"),
    "cli": ("ore_core.cli.*", "ore_core.cli_entry", "ore_core.scaffold.*"),
    "testing": ("ore_core.testing.*",),
}
"""Floor -> its modules: a module's name, or `package.*` for a package and all below it
(a module named exactly belongs to that floor whatever package holds it)."""

MAY_LOAD: dict[str, tuple[str, ...]] = {
    "vocabulary": ("vocabulary",),
    "ledger": ("vocabulary", "ledger"),
    "session": ("vocabulary", "ledger", "session"),
    "config": ("vocabulary", "ledger", "session", "config"),
    "sdk": ("vocabulary", "sdk"),
    "bus": ("vocabulary", "ledger", "session", "config", "sdk", "bus"),
    "plugins": ("vocabulary", "ledger", "session", "config", "sdk", "bus", "plugins"),
}
"""Floor -> the floors its modules may load (the cli and the testing kit: any)."""


def floor_of(module: str) -> str | None:
    """The floor naming `module` exactly, else the one naming its innermost package."""
    best: tuple[int, str] | None = None
    for floor, names in FLOORS.items():
        for name in names:
            if name == module:
                return floor
            package = name.removesuffix(".*")
            inside = name.endswith(".*") and (module + ".").startswith(package + ".")
            if inside and (best is None or len(package) > best[0]):
                best = (len(package), floor)
    return None if best is None else best[1]


def every_module() -> list[str]:
    """Every module of the ore_core source tree, by its file."""
    root = Path(ore_core.__file__).parent
    modules = []
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules.append(".".join(parts))
    return modules


def modules_of(floor: str) -> list[str]:
    return [module for module in every_module() if floor_of(module) == floor]


def test_every_module_is_on_a_floor() -> None:
    assert [module for module in every_module() if floor_of(module) is None] == []


@pytest.mark.parametrize("floor", list(MAY_LOAD))
def test_a_floor_loads_nothing_above_it(floor: str) -> None:
    modules = modules_of(floor)
    assert modules
    loaded = modules_after("\n".join(f"import {module}" for module in modules))
    allowed = MAY_LOAD[floor]
    above = {module: floor_of(module) for module in loaded if floor_of(module) not in allowed}
    assert above == {}


def test_import_config_loads_few_modules_and_no_stream() -> None:
    loaded = modules_after("import ore_core.config")
    assert len(loaded) <= MAX_CONFIG_MODULES, loaded
    assert [module for module in loaded if floor_of(module) not in MAY_LOAD["config"]] == []
    assert "ore_core.session.stream" not in loaded


@pytest.mark.parametrize(
    ("package", "module"),
    [
        ("ore_core.ledger", "ore_core.ledger.thread"),
        ("ore_core.session", "ore_core.session.stream"),
        ("ore_core.session.stores", "ore_core.session.stores.memory"),
        ("ore_core.conduit", "ore_core.conduit.client"),
        ("ore_core.plugins", "ore_core.plugins.manager"),
    ],
)
def test_a_package_face_loads_its_modules_only_when_a_name_is_used(
    package: str, module: str
) -> None:
    assert module not in modules_after(f"import {package}")


def test_the_plugin_manager_module_loads_nothing_of_the_bus() -> None:
    loaded = modules_after("import ore_core.plugins.manager, ore_core.plugins.builtin.stores")
    assert [module for module in loaded if floor_of(module) == "bus"] == []


FACES = [
    "ore_core.bus.api",
    "ore_core.bus.cluster",
    "ore_core.bus.egress",
    "ore_core.bus.ingress",
    "ore_core.bus.ops",
    "ore_core.bus.server",
    "ore_core.bus.store",
    "ore_core.conduit",
    "ore_core.ledger",
    "ore_core.plugins",
    "ore_core.session",
    "ore_core.session.stores",
]


@pytest.mark.parametrize(
    ("package", "name"),
    [(package, name) for package in FACES for name in importlib.import_module(package).__all__],
)
def test_every_name_a_face_exports_resolves(package: str, name: str) -> None:
    assert getattr(importlib.import_module(package), name) is not None


@pytest.mark.parametrize("package", FACES)
def test_an_unknown_name_of_a_face_is_an_attribute_error(package: str) -> None:
    with pytest.raises(AttributeError, match="no_such_name"):
        _ = importlib.import_module(package).no_such_name


ROOMS: dict[str, tuple[str, ...]] = {
    "ingress": ("ore_core.bus.ingress.*",),
    "egress": ("ore_core.bus.egress.*",),
    "api": ("ore_core.bus.api.*",),
    "cluster": ("ore_core.bus.cluster.*",),
    "server": ("ore_core.bus.server.*",),
    "store": ("ore_core.bus.store.*",),
    "ops": ("ore_core.bus.ops.*",),
    "service": ("ore_core.bus.service", "ore_core.bus"),
    "bridge": ("ore_core.bridge.*",),
}
"""The rooms of the bus floor (docs/design/conduit-shape.md, section 2) -> their modules,
written as in `FLOORS`. Below the bus, the floors are the rooms, but the SDK floor is
three: `_nats` (the transport every side shares), `conduit` (what a conduit process
imports) and `files` (the files bucket's access, shared by the core and conduits)."""

_BELOW = ("vocabulary", "ledger", "session")

ROOM_MAY_IMPORT: dict[str, tuple[str, ...]] = {
    "server": ("vocabulary", "config", "_nats"),
    "cluster": (*_BELOW, "_nats", "server"),
    "store": (*_BELOW, "config", "_nats", "cluster", "server"),
    "bridge": (*_BELOW, "config", "_nats"),
    "egress": (*_BELOW, "_nats", "bridge"),
    "ingress": (*_BELOW, "_nats", "bridge", "cluster", "server", "egress"),
    "api": (*_BELOW, "_nats", "files", "bridge", "cluster"),
    "ops": (*_BELOW, "config", "_nats", "conduit", *(room for room in ROOMS if room != "service")),
    "service": (*_BELOW, "config", "_nats", "conduit", "files", "plugins", *ROOMS),
}
"""Room -> what its modules may import (besides their own room): every import counts,
also one inside a function or under `TYPE_CHECKING`, so a dependency is never hidden."""


def room_of(module: str) -> str | None:
    """The bus room of `module`, or the floor below the bus that holds it."""
    if module == "ore_core._nats" or module.startswith("ore_core._nats."):
        return "_nats"
    if module == "ore_core.conduit" or module.startswith("ore_core.conduit."):
        return "conduit"
    if module == "ore_core.files" or module.startswith("ore_core.files."):
        return "files"
    for room, names in ROOMS.items():
        for name in names:
            package = name.removesuffix(".*")
            if module == package or (name.endswith(".*") and module.startswith(package + ".")):
                return room
    return floor_of(module)


def imports_of(module: str) -> set[str]:
    """Every module of ore_core that `module`'s source imports, wherever the import is."""
    spec = importlib.util.find_spec(module)
    assert spec is not None
    assert spec.origin is not None
    found: set[str] = set()
    for node in ast.walk(ast.parse(Path(spec.origin).read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{module}: ore_core imports absolutely"
            found.add(node.module or "")
    return {name for name in found if name == "ore_core" or name.startswith("ore_core.")}


def test_every_module_of_the_bus_floor_is_in_a_room() -> None:
    assert [module for module in modules_of("bus") if room_of(module) not in ROOMS] == []


@pytest.mark.parametrize("room", list(ROOM_MAY_IMPORT))
def test_a_room_imports_only_what_its_face_allows(room: str) -> None:
    allowed = {room, *ROOM_MAY_IMPORT[room]}
    modules = [module for module in modules_of("bus") if room_of(module) == room]
    assert modules
    wrong = {
        f"{module} imports {name}": room_of(name)
        for module in modules
        for name in sorted(imports_of(module))
        if room_of(name) not in allowed
    }
    assert wrong == {}


def test_the_room_check_sees_an_import_inside_a_function(tmp_path: Path) -> None:
    (tmp_path / "late.py").write_text("def f() -> None:\n    from ore_core.bus.service import x\n")
    import sys

    sys.path.insert(0, str(tmp_path))
    try:
        assert imports_of("late") == {"ore_core.bus.service"}
    finally:
        sys.path.remove(str(tmp_path))
