"""Every endpoint the docs and `ore chat --help` show is spelt as the conduits declare
theirs (`conversation_key` + `key_form`), and every gateway example passes the check
`ore serve` makes at start (issue 41)."""

from __future__ import annotations

import re
import tomllib

import pytest
from click.testing import CliRunner

from ore_conduit_discord import DiscordConduit
from ore_conduit_matrix import MatrixConduit
from ore_conduit_nats.bridge import NatsBridge
from ore_conduit_slack.conduit import SlackConduit
from ore_conduit_stdin.conduit import StdinConduit
from ore_conduit_telegram.conduit import TelegramConduit
from ore_conduit_web.conduit import WebConduit
from ore_core.bridge.gateways import check_gateways
from ore_core.cli import main
from ore_core.config import GatewaySettings
from ore_core.endpoint import parse_endpoint
from tests.paths import ROOT

DOCS = [ROOT / "docs" / "configuration.md", ROOT / "docs" / "bridging.md"]
CONDUITS = {
    c.name: c
    for c in (
        DiscordConduit,
        MatrixConduit,
        NatsBridge,
        SlackConduit,
        StdinConduit,
        TelegramConduit,
        WebConduit,
    )
}
TYPED = re.compile(r"(?:--attach|ore link add \S+|ore link remove|ore send) `?([a-z]+:[^\s`'\"]+)")
"""An endpoint as typed after the commands that take one."""


def keys(namespace: str) -> str | None:
    return CONDUITS[namespace].conversation_key if namespace in CONDUITS else None


def forms(namespace: str) -> object:
    return CONDUITS[namespace].key_form if namespace in CONDUITS else None


def typed_examples() -> list[str]:
    text = "".join(doc.read_text(encoding="utf-8") for doc in DOCS)
    chat_help = CliRunner().invoke(main, ["chat", "--help"], terminal_width=400).output
    text += " ".join(f"--attach {shown}" for shown in re.findall(r"`([a-z]+:[^`=]+)`", chat_help))
    # "3fa1c0de…" in the docs stands for a whole thread id.
    found = {example.replace("…", "").rstrip(".,)") for example in TYPED.findall(text)}
    return sorted(example for example in found if example.split(":")[0] in CONDUITS)


def gateway_blocks() -> list[str]:
    """Each TOML block of the docs that declares a `[[gateway]]`, as written."""
    return [
        block
        for doc in DOCS
        for block in re.findall(r"```toml\n(.*?)```", doc.read_text(encoding="utf-8"), re.DOTALL)
        if "[[gateway]]" in block
    ]


def gateway_examples() -> list[dict[str, object]]:
    return [gateway for block in gateway_blocks() for gateway in tomllib.loads(block)["gateway"]]


def test_the_docs_show_examples_of_every_conduit_s_endpoint() -> None:
    assert {example.split(":")[0] for example in typed_examples()} >= {"slack", "nats", "web"}


@pytest.mark.parametrize("example", typed_examples())
def test_each_typed_endpoint_of_the_docs_is_of_its_conduit_s_declared_form(example: str) -> None:
    parse_endpoint(example, keys, forms)  # type: ignore[arg-type]


@pytest.mark.parametrize("gateway", gateway_examples(), ids=lambda g: str(g["name"]))
def test_each_gateway_example_passes_the_check_of_ore_serve(gateway: dict[str, object]) -> None:
    check_gateways([GatewaySettings.model_validate(gateway)], keys, forms)  # type: ignore[arg-type]


def test_the_nats_walk_through_uses_ore_s_own_commands_after_its_prerequisite() -> None:
    """The commands `tests/cli/test_cli_serve.py::test_the_bridging_walk_through_...` runs."""
    text = (ROOT / "docs" / "bridging.md").read_text(encoding="utf-8")
    section = text.split("## Walk-through: a NATS channel <-> terminal", 1)[1].split("\n## ")[0]
    commands = re.findall(r"^\$ (.+)$", section, re.MULTILINE)
    assert commands == [
        "ore install ./conduits/nats",
        "ore serve &",
        "ore conduit nats &",
        'ore send nats:room "hi" --name Bo',
        "ore chat --attach nats:room",
    ]
    assert (ROOT / "conduits" / "nats" / "pyproject.toml").is_file()
