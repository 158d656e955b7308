"""Setup: tokens checked at start with one clear line, settings, `ore conduit slack`."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from ore_conduit_slack import MissingSecret, SlackConduit, SlackConfig
from ore_conduit_slack.testing import FakeSlack
from ore_core import ConduitConfigError

if TYPE_CHECKING:
    from ore_core.bus.server.embedded import EmbeddedNatsServer
    from tests.conftest import Harness

ORE = Path(sys.executable).with_name("ore")
SECRETS = ("SLACK_BOT_TOKEN", "SLACK_APP_TOKEN", "SLACK_SIGNING_SECRET")


@pytest.fixture(autouse=True)
def no_slack_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in SECRETS:
        monkeypatch.delenv(variable, raising=False)


async def run_briefly(slack: Harness, **settings: object) -> None:
    config = SlackConduit.load_config(settings)
    await asyncio.wait_for(SlackConduit().run(slack.core.client, config), 10)


@pytest.mark.asyncio
async def test_a_missing_bot_token_names_the_variable(slack: Harness) -> None:
    with pytest.raises(MissingSecret, match=r"^SLACK_BOT_TOKEN is not set"):
        await run_briefly(slack, api_url=slack.fake.api_url)


@pytest.mark.asyncio
async def test_a_missing_app_token_names_the_variable_in_socket_mode(slack: Harness) -> None:
    with pytest.raises(MissingSecret, match=r"^SLACK_APP_TOKEN is not set"):
        await run_briefly(slack, api_url=slack.fake.api_url, bot_token=slack.fake.bot_token)


@pytest.mark.asyncio
async def test_a_missing_signing_secret_names_the_variable_in_http_mode(slack: Harness) -> None:
    with pytest.raises(MissingSecret, match=r"^SLACK_SIGNING_SECRET is not set"):
        await run_briefly(
            slack, mode="http", api_url=slack.fake.api_url, bot_token=slack.fake.bot_token
        )


@pytest.mark.asyncio
async def test_a_wrong_bot_token_is_refused_by_auth_test_naming_the_variable(
    slack: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-wrong")
    with pytest.raises(MissingSecret, match=r"^SLACK_BOT_TOKEN was refused .*invalid_auth"):
        await run_briefly(slack, api_url=slack.fake.api_url, app_token=slack.fake.app_token)
    assert slack.fake.methods() == ["auth.test"]


@pytest.mark.asyncio
async def test_a_wrong_app_token_names_the_variable(slack: Harness) -> None:
    with pytest.raises(MissingSecret, match=r"^SLACK_APP_TOKEN was refused .*invalid_auth"):
        await run_briefly(
            slack,
            api_url=slack.fake.api_url,
            bot_token=slack.fake.bot_token,
            app_token="xapp-wrong",
        )


@pytest.mark.asyncio
async def test_tokens_come_from_the_environment(
    slack: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLACK_BOT_TOKEN", slack.fake.bot_token)
    monkeypatch.setenv("SLACK_APP_TOKEN", slack.fake.app_token)
    await slack.start(bot_token=None, app_token=None, signing_secret=None)
    root = await slack.fake.user_says("CENV", "from env")
    assert await slack.answers("CENV", root) == ["echo: from env"]


def test_settings_are_validated_naming_the_key() -> None:
    with pytest.raises(ConduitConfigError, match="on_edit"):
        SlackConduit.load_config({"on_edit": "sometimes"})
    with pytest.raises(ConduitConfigError, match="message_chars"):
        SlackConduit.load_config({"message_chars": 50_000})
    config = SlackConduit.load_config({"bot_token": "xoxb-1"})
    assert isinstance(config, SlackConfig)
    assert "xoxb-1" not in repr(config)  # secrets never reach logs


def run_ore(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {
        **{k: v for k, v in os.environ.items() if k not in SECRETS},
        "ORE_LOAD_PLUGINS": "ore-conduit-slack",
        "ORE_LOG__LEVEL": "warning",
        **env,
    }
    return subprocess.run(
        [str(ORE), *args], capture_output=True, text=True, env=environment, timeout=60
    )


@pytest.mark.slow  # starts ore
def test_ore_conduit_list_shows_the_slack_conduit(ore_isolated_env: Path) -> None:
    listing = run_ore("conduit", "--list")
    assert listing.returncode == 0, listing.stderr
    assert "slack" in listing.stdout
    assert "ore-conduit-slack" in listing.stdout


@pytest.mark.slow  # starts ore
@pytest.mark.asyncio
async def test_ore_conduit_slack_without_tokens_names_both_in_one_line_and_nothing_else(
    ore_isolated_env: Path, ore_nats_server: EmbeddedNatsServer
) -> None:
    result = await asyncio.to_thread(
        run_ore, "conduit", "slack", "--nats", ore_nats_server.url, ORE_LOG__LEVEL="info"
    )
    assert result.returncode == 1
    assert (result.stdout + result.stderr).splitlines() == [
        "Error: SLACK_BOT_TOKEN and SLACK_APP_TOKEN are not set: export them (or set "
        "bot_token and app_token in [plugins.slack])"
    ]


@pytest.mark.slow  # starts ore
@pytest.mark.asyncio
async def test_ore_conduit_slack_with_a_wrong_token_exits_1_naming_it(
    ore_isolated_env: Path, ore_nats_server: EmbeddedNatsServer
) -> None:
    fake = await FakeSlack().start()
    try:
        result = await asyncio.to_thread(
            run_ore,
            "conduit",
            "slack",
            "--nats",
            ore_nats_server.url,
            "--set",
            f"api_url={fake.api_url}",
            SLACK_BOT_TOKEN="xoxb-wrong",
            SLACK_APP_TOKEN=fake.app_token,
        )
    finally:
        await fake.close()
    assert result.returncode == 1
    (line,) = result.stderr.splitlines()
    assert line.startswith("Error: SLACK_BOT_TOKEN was refused by Slack (auth.test: invalid_auth)")


def test_the_readme_settings_table_is_valid() -> None:
    import tomllib

    readme = (Path(__file__).parents[1] / "README.md").read_text()
    block = readme.split("```toml\n", 1)[1].split("```", 1)[0]
    section = tomllib.loads(block)["plugins"]["slack"]
    config = SlackConduit.load_config(section)
    assert config == SlackConfig()  # the README shows the defaults
