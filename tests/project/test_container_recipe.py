"""The container recipe (Dockerfile, compose.yaml) is wired the way ore reads it.

The machine that runs the tests has no container engine, so what can be checked
without one is: the compose file parses, runs nats-server with JetStream, the core and
the web conduit, with commands ore accepts and `ORE_*` variables that are settings ore
reads; and the Dockerfile installs exactly what the README installs.
"""

from __future__ import annotations

import re
from typing import Any

import click
import pytest
import yaml

from ore_core.cli import main
from ore_core.config import load_settings
from tests.paths import ROOT

COMPOSE: dict[str, Any] = yaml.safe_load((ROOT / "compose.yaml").read_text(encoding="utf-8"))
SERVICES: dict[str, dict[str, Any]] = COMPOSE["services"]
DOCKERFILE = (ROOT / "Dockerfile").read_text(encoding="utf-8")
_DEFAULTED = re.compile(r"^\$\{\w+:-(.*)\}$")


def environment(service: str) -> dict[str, str]:
    """The service's environment as the container gets it (`${X:-}` unset: the default)."""
    env = SERVICES[service].get("environment", {})
    return {name: _DEFAULTED.sub(r"\1", str(value)) for name, value in env.items()}


def installed_paths(text: str) -> set[str]:
    """The checkout paths (`./conduits/web`) of every `pip install` in `text`."""
    paths: set[str] = set()
    for command in re.findall(r"pip install ([^&`\n]+)", text):
        paths |= {word for word in command.split() if word.startswith("./")}
    return paths


def test_compose_runs_nats_with_jetstream_the_core_and_the_web_conduit() -> None:
    assert set(SERVICES) == {"nats", "core", "web"}
    assert "--jetstream" in SERVICES["nats"]["command"]
    assert SERVICES["core"]["command"][:2] == ["ore", "serve"]
    assert SERVICES["web"]["command"] == ["ore", "conduit", "web"]


@pytest.mark.parametrize("service", ["core", "web"])
def test_the_commands_are_ones_ore_accepts(service: str) -> None:
    _, *args = SERVICES[service]["command"]
    context = main.make_context("ore", [*args], resilient_parsing=False)
    command = main.get_command(context, args[0])
    assert isinstance(command, click.Command)
    command.make_context(args[0], args[1:])  # an unknown option or value raises here


@pytest.mark.parametrize("service", ["core", "web"])
def test_every_ore_variable_is_a_setting_ore_reads(
    service: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    variables = {name: value for name, value in environment(service).items() if "ORE_" in name}
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    read = {value.source for value in load_settings().describe_sources()}
    ore_variables = {name for name in variables if name.startswith("ORE_") and variables[name]}
    assert ore_variables - {"ORE_OPENAI_BASE_URL"} <= read  # that one is the plugin's own


@pytest.mark.parametrize("service", ["core", "web"])
def test_the_services_reach_nats_where_the_nats_service_listens(service: str) -> None:
    assert environment(service)["ORE_NATS__URL"] == "nats://nats:4222"


def test_the_web_conduit_listens_where_compose_publishes_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from ore_conduit_web.conduit import WebConduit

    for name, value in environment("web").items():
        monkeypatch.setenv(name, value)
    config = WebConduit.load_config(load_settings().plugin_config("web"))
    assert (config.host, config.port) == ("0.0.0.0", 8080)
    assert SERVICES["web"]["ports"] == [f"{config.port}:{config.port}"]


def test_the_core_health_check_asks_the_health_port_it_serves() -> None:
    command = SERVICES["core"]["command"]
    port = command[command.index("--health-port") + 1]
    assert f"http://127.0.0.1:{port}/readyz" in " ".join(SERVICES["core"]["healthcheck"]["test"])


def test_the_dockerfile_installs_what_the_readme_installs() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert installed_paths(DOCKERFILE) == installed_paths(readme)
    assert re.search(r"^FROM python:3\.\d+-slim$", DOCKERFILE, re.M)
