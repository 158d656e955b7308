"""Settings: the token is checked before anything starts, bad settings name their key."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from ore_conduit_discord import DiscordConduit, DiscordConfig, MissingToken
from ore_conduit_discord.testing import FakeDiscord
from ore_core.bus.server.embedded import EmbeddedNatsServer
from ore_core.conduit import ConduitConfigError

ORE = Path(sys.executable).with_name("ore")
SHAPED = "MTEwMDAwMDAwMDAwMDAwMDAwMQ.GfAkE1.a-revoked-token-0123456789abcdef"


def test_a_missing_token_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DISCORD_BOT_TOKEN", raising=False)
    with pytest.raises(MissingToken, match=r"^DISCORD_BOT_TOKEN is not set"):
        DiscordConfig().check_secrets()


def test_a_malformed_token_is_refused_without_asking_discord() -> None:
    with pytest.raises(MissingToken, match="is not a bot token"):
        DiscordConfig(token="1300000000000000001").check_secrets()  # an application id


def test_the_token_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DISCORD_BOT_TOKEN", f"Bot {SHAPED}")
    assert DiscordConfig().bot_token() == SHAPED


def test_a_webhook_that_is_not_a_webhook_url_is_refused_naming_the_key() -> None:
    with pytest.raises(ConduitConfigError, match="webhooks"):
        DiscordConduit.load_config({"webhooks": {"1300000000000000001": "https://example.com/x"}})


def test_the_readme_settings_show_the_defaults() -> None:
    readme = (Path(__file__).parents[1] / "README.md").read_text()
    block = readme.split("```toml\n", 1)[1].split("```", 1)[0]
    section = tomllib.loads(block)["plugins"]["discord"]
    assert DiscordConduit.load_config(section).model_dump(exclude={"webhooks"}) == (
        DiscordConfig().model_dump(exclude={"webhooks"})
    )


def run_ore(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {
        **{k: v for k, v in os.environ.items() if not k.startswith("DISCORD_")},
        "ORE_LOAD_PLUGINS": "ore-conduit-discord",
        "ORE_LOG__LEVEL": "info",
        **env,
    }
    return subprocess.run(
        [str(ORE), *args], capture_output=True, text=True, env=environment, timeout=60, check=False
    )


@pytest.mark.slow  # starts ore
def test_ore_conduit_discord_without_a_token_says_only_that(
    ore_isolated_env: Path, ore_nats_server: EmbeddedNatsServer
) -> None:
    result = run_ore("conduit", "discord", "--nats", ore_nats_server.url)
    assert result.returncode == 1
    assert (result.stdout + result.stderr).splitlines() == [
        "Error: DISCORD_BOT_TOKEN is not set: export it (or set token in [plugins.discord])"
    ]


@pytest.mark.slow  # starts ore
@pytest.mark.asyncio
async def test_ore_conduit_discord_with_a_refused_token_exits_1_with_one_line(
    ore_isolated_env: Path, ore_nats_server: EmbeddedNatsServer
) -> None:
    async with FakeDiscord() as fake:
        result = await asyncio.to_thread(
            run_ore, "conduit", "discord", "--nats", ore_nats_server.url,
            "--set", f"api_url={fake.url}/api/v10", DISCORD_BOT_TOKEN=SHAPED,
            ORE_LOG__LEVEL="warning",
        )  # fmt: skip
    assert result.returncode == 1
    assert (result.stdout + result.stderr).splitlines() == [
        "Error: Discord refused the bot token (401): copy it again from the developer "
        "portal's Bot page"
    ]
    assert fake.gateway.identified == 0
