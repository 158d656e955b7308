"""The public surface (`ore_core`) and the light conduit SDK (`ore_core.conduit`)."""

from __future__ import annotations

import pytest

import ore_core
from tests.import_support import modules_after as _modules_after

MAX_SDK_MODULES = 20  # 15 + .publisher (acked sends) + the _nats face (issue 27) + .capabilities
# + .counters (issue 33: the conduit metrics) + ore_core.tracing (issue 33: the publish and
# delivery spans; it loads OpenTelemetry only once tracing is enabled)


@pytest.mark.parametrize("name", ore_core.__all__)
def test_every_public_name_resolves(name: str) -> None:
    assert getattr(ore_core, name) is not None


def test_public_names_are_the_objects_of_their_defining_modules() -> None:
    from ore_core.conduit import ConduitClient
    from ore_core.errors import OreError
    from ore_core.turn import Turn

    assert ore_core.ConduitClient is ConduitClient
    assert ore_core.OreError is OreError
    assert ore_core.Turn is Turn


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no_such_name"):
        _ = ore_core.no_such_name  # type: ignore[attr-defined]


def test_import_ore_core_loads_only_the_package() -> None:
    assert _modules_after("import ore_core") == ["ore_core"]


def test_import_ore_core_bus_does_not_load_the_core_service() -> None:
    assert _modules_after("import ore_core.bus") == ["ore_core", "ore_core.bus"]


@pytest.mark.parametrize(
    "statement",
    [
        "import ore_core.conduit",
        "from ore_core import Conduit, ConduitClient, ConduitConfig, UserMessageEvent, Text",
    ],
)
def test_the_conduit_sdk_stays_small(statement: str) -> None:
    loaded = _modules_after(statement)
    assert len(loaded) <= MAX_SDK_MODULES, loaded
    heavy = ("ore_core.session", "ore_core.ledger", "ore_core.bus.", "ore_core.plugins")
    assert [name for name in loaded if name.startswith(heavy)] == []
