"""The `ore.toml` of docs/bridging.md's walk-throughs "Discord <-> Slack" and "Matrix <->
Telegram" is what a user can write: it loads with ore's real settings (`load_settings`,
the file as written), each `[plugins.NAME]` table validates with its conduit's own
config model, every gateway passes the check `ore serve` makes at start, and the
commands run are ore's own (issue 38)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ore_core.bridge.gateways import check_gateways
from ore_core.config import load_settings
from tests.docs.test_docs_endpoints import CONDUITS, forms, keys
from tests.paths import ROOT

WALK_THROUGHS = {
    "Discord <-> Slack": ("discord", "slack"),
    "Matrix <-> Telegram": ("matrix", "telegram"),
}


def section(title: str) -> str:
    text = (ROOT / "docs" / "bridging.md").read_text(encoding="utf-8")
    return text.split(f"## Walk-through: {title}\n", 1)[1].split("\n## ", 1)[0]


def ore_toml(title: str) -> str:
    (block,) = re.findall(r"```toml\n(.*?)```", section(title), re.DOTALL)
    return re.sub(r"^ {3}", "", block, flags=re.MULTILINE)  # the list item's indent


@pytest.mark.parametrize("title", WALK_THROUGHS)
def test_the_walk_through_s_ore_toml_loads_with_the_real_settings(
    title: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("DISCORD_BOT_TOKEN", "TELEGRAM_BOT_TOKEN", "MATRIX_PASSWORD"):
        monkeypatch.setenv(name, "from-the-environment")
    config = tmp_path / "ore.toml"
    config.write_text(ore_toml(title), encoding="utf-8")
    settings = load_settings(config)
    (gateway,) = settings.gateway
    assert {endpoint.conduit for endpoint in gateway.endpoints} == set(WALK_THROUGHS[title])
    check_gateways(settings.gateway, keys, forms)  # type: ignore[arg-type]
    for name, table in settings.plugins.items():
        CONDUITS[name].load_config(table)


@pytest.mark.parametrize("title", WALK_THROUGHS)
def test_the_walk_through_runs_ore_serve_and_both_conduits(title: str) -> None:
    commands = re.findall(r"^\s*\$ (.+)$", section(title), re.MULTILINE)
    conduits = [f"ore conduit {name} &" for name in WALK_THROUGHS[title]]
    assert [c for c in commands if c.startswith("ore ")][:3] == ["ore serve &", *conduits]
