"""`[[gateway]]` settings: validated when ore.toml is loaded; loops refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ore_core.config import ConfigError, load_settings


def gateway(name: str, *endpoints: tuple[str, str], **extra: Any) -> str:
    lines = [f'[[gateway]]\nname = "{name}"']
    lines += [f'{key} = "{value}"' for key, value in extra.items()]
    for conduit, key in endpoints:
        lines.append(f'[[gateway.endpoints]]\nconduit = "{conduit}"\nkey = "{key}"')
    return "\n".join(lines) + "\n"


def load(tmp_path: Path, text: str) -> Any:
    path = tmp_path / "ore.toml"
    path.write_text(text)
    return load_settings(path)


@pytest.fixture(autouse=True)
def _isolated(ore_isolated_env: object) -> None:
    """No ORE_* of the user's environment."""


def test_a_gateway_is_read_with_its_defaults(tmp_path: Path) -> None:
    settings = load(tmp_path, gateway("team", ("slack", "C1/2"), ("stdin", "id=t1")))
    (team,) = settings.gateway
    assert (team.name, team.answer, team.label, team.thread_id) == (
        "team",
        "origin",
        "{name} ({conduit})",
        "gateway-team",
    )
    assert [(e.conduit, e.key, e.direction) for e in team.endpoints] == [
        ("slack", "C1/2", "inout"),
        ("stdin", "id=t1", "inout"),
    ]


def test_an_endpoint_listed_twice_in_a_gateway_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="listed twice"):
        load(tmp_path, gateway("team", ("slack", "C1"), ("slack", "C1")))


def test_one_endpoint_in_two_gateways_is_refused(tmp_path: Path) -> None:
    text = gateway("a", ("slack", "C1"), ("stdin", "id=t1")) + gateway(
        "b", ("slack", "C1"), ("nats", "nats.channel=x")
    )
    with pytest.raises(ConfigError, match="is in gateways 'a' and 'b'"):
        load(tmp_path, text)


def test_two_gateways_on_one_thread_are_refused(tmp_path: Path) -> None:
    text = gateway("a", ("slack", "C1"), ("stdin", "id=t1"), thread="t") + gateway(
        "b", ("slack", "C2"), ("nats", "nats.channel=x"), thread="t"
    )
    with pytest.raises(ConfigError, match="both use thread t"):
        load(tmp_path, text)


def test_a_gateway_of_one_endpoint_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="at least two endpoints"):
        load(tmp_path, gateway("solo", ("slack", "C1")))


def test_an_unknown_answer_policy_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="answer"):
        load(tmp_path, gateway("a", ("slack", "C1"), ("stdin", "id=t"), answer="some"))


def test_an_invalid_gateway_name_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"gateway\.0\.name"):
        load(tmp_path, gateway("Team A", ("slack", "C1"), ("stdin", "id=t")))


def test_an_invalid_conduit_namespace_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="invalid conduit namespace"):
        load(tmp_path, gateway("a", ("Slack!", "C1"), ("stdin", "id=t")))
