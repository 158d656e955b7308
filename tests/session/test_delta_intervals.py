"""Delta pacing per namespace: declared by conduit classes, overridden in the config."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import pytest

from ore_core import Manager
from ore_core.cli.app import delta_intervals
from ore_core.conduit import Capabilities, Conduit
from ore_core.config import ConfigError, OreSettings, load_settings
from ore_core.ids import NAMESPACE_KEY
from ore_core.plugins.registry import Registrations
from ore_core.session.echo import EchoProcessor
from ore_core.session.stores.memory import MemoryStore


@pytest.fixture(autouse=True)
def home(ore_isolated_env: Path) -> Path:
    return ore_isolated_env


class FastConduit(Conduit):
    name: ClassVar[str] = "fast"
    capabilities: ClassVar[Capabilities] = Capabilities(delta_interval=0.02)


class PlainConduit(Conduit):
    name: ClassVar[str] = "plain"


def registered(*conduits: type[Conduit]) -> Registrations:
    return Registrations(conduits={conduit.name: conduit for conduit in conduits})


def test_a_conduit_declares_its_pacing_for_its_namespace() -> None:
    intervals = delta_intervals(registered(FastConduit, PlainConduit), OreSettings())
    assert intervals == {"fast": 0.02}


def test_the_config_wins_over_what_a_conduit_declares() -> None:
    settings = OreSettings(session={"delta_intervals": {"fast": 0.5, "web": 0.03}})
    intervals = delta_intervals(registered(FastConduit), settings)
    assert intervals == {"fast": 0.5, "web": 0.03}


def test_delta_intervals_come_from_the_config_file(tmp_path: Path) -> None:
    path = tmp_path / "ore.toml"
    path.write_text("[session.delta_intervals]\nweb = 0.03\n")
    assert load_settings(path).session.delta_intervals == {"web": 0.03}


def test_a_negative_delta_interval_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "ore.toml"
    path.write_text("[session.delta_intervals]\nweb = -1\n")
    with pytest.raises(ConfigError, match="delta_intervals"):
        load_settings(path)


async def test_a_thread_is_paced_by_its_namespace() -> None:
    async with Manager(
        MemoryStore(), EchoProcessor(), delta_interval=0.1, delta_intervals={"web": 0.03}
    ) as manager:
        web = await manager.create({NAMESPACE_KEY: "web"})
        other = await manager.create({NAMESPACE_KEY: "slack"})
        bare = await manager.create()
    assert web.delta_pacing == (0.03, 4096)
    assert other.delta_pacing == bare.delta_pacing == (0.1, 4096)


def test_a_delta_interval_for_a_name_that_is_no_namespace_is_a_clear_error(
    tmp_path: Path,
) -> None:
    path = tmp_path / "ore.toml"
    path.write_text('[session.delta_intervals]\n"Web Page" = 0.03\n')
    with pytest.raises(ConfigError, match="'Web Page' is not a namespace"):
        load_settings(path)
