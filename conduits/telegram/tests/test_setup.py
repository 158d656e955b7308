"""Setup: the token checked at start with one clear line, settings, `ore conduit telegram`."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from ore_conduit_telegram import MissingToken, TelegramConduit
from ore_conduit_telegram.testing import FakeTelegram
from ore_core import ConduitConfigError

if TYPE_CHECKING:
    from ore_core.bus.server.embedded import EmbeddedNatsServer
    from tests.conftest import Harness

ORE = Path(sys.executable).with_name("ore")


@pytest.fixture(autouse=True)
def no_telegram_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TELEGRAM_BOT_TOKEN", raising=False)
    monkeypatch.delenv("TELEGRAM_WEBHOOK_SECRET", raising=False)


async def run_briefly(tg: Harness, **settings: object) -> None:
    config = TelegramConduit.load_config({"api_url": tg.fake.api_url, **settings})
    await asyncio.wait_for(TelegramConduit().run(tg.core.client, config), 10)


@pytest.mark.asyncio
async def test_a_missing_token_names_the_variable(tg: Harness) -> None:
    with pytest.raises(MissingToken, match=r"^TELEGRAM_BOT_TOKEN is not set"):
        await run_briefly(tg)


@pytest.mark.asyncio
async def test_a_wrong_token_is_refused_by_get_me_without_showing_it(
    tg: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", "123:wrong-token-" + "x" * 23)
    with pytest.raises(MissingToken, match=r"^TELEGRAM_BOT_TOKEN was refused .*401") as caught:
        await run_briefly(tg)
    assert "wrong-token" not in str(caught.value)


@pytest.mark.asyncio
async def test_an_unreachable_api_says_so_without_the_token(tg: Harness) -> None:
    token = "1:" + "a" * 35
    config = TelegramConduit.load_config({"api_url": "http://127.0.0.1:9", "token": token})
    with pytest.raises(MissingToken, match="cannot reach Telegram") as caught:
        await TelegramConduit().run(tg.core.client, config)
    assert token not in str(caught.value)


@pytest.mark.asyncio
async def test_webhook_mode_needs_a_secret(tg: Harness) -> None:
    with pytest.raises(MissingToken, match=r"^TELEGRAM_WEBHOOK_SECRET is not set"):
        await run_briefly(tg, token=tg.fake.token, mode="webhook")


@pytest.mark.asyncio
async def test_the_token_comes_from_the_environment(
    tg: Harness, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", tg.fake.token)
    conduit = await tg.start(token=None)
    await tg.fake.user_says(1001, "env")
    await tg.shows(1001, ["echo: env"])
    assert conduit.running


def test_unknown_and_bad_settings_are_refused_naming_the_key() -> None:
    with pytest.raises(ConduitConfigError, match="no_such_key"):
        TelegramConduit.load_config({"no_such_key": 1})
    with pytest.raises(ConduitConfigError, match="durable"):
        TelegramConduit.load_config({"durable": "a_b"})
    with pytest.raises(ConduitConfigError, match="message_chars"):
        TelegramConduit.load_config({"message_chars": 5000})


def test_the_capabilities_say_edits_arrive_and_deletes_do_not() -> None:
    capabilities = TelegramConduit.capabilities
    assert (capabilities.edits_arrive, capabilities.deletes_arrive) == (True, False)
    assert (capabilities.markup, capabilities.max_message_length) == ("telegram_html", 4096)


def run_ore(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {
        **{k: v for k, v in os.environ.items() if not k.startswith("TELEGRAM_")},
        "ORE_LOAD_PLUGINS": "ore-conduit-telegram",
        "ORE_LOG__LEVEL": "warning",
        **env,
    }
    return subprocess.run(
        [str(ORE), *args], capture_output=True, text=True, env=environment, timeout=60, check=False
    )


@pytest.mark.slow  # starts ore
@pytest.mark.asyncio
async def test_ore_conduit_telegram_with_a_wrong_token_exits_1_with_one_line(
    ore_isolated_env: Path, ore_nats_server: EmbeddedNatsServer
) -> None:
    fake = await FakeTelegram().start()
    try:
        result = await asyncio.to_thread(
            run_ore,
            "conduit",
            "telegram",
            "--nats",
            ore_nats_server.url,
            "--set",
            f"api_url={fake.api_url}",
            TELEGRAM_BOT_TOKEN="123:" + "w" * 35,
        )
    finally:
        await fake.close()
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "Error: TELEGRAM_BOT_TOKEN was refused by Telegram (getMe: 401 Unauthorized); "
        "use the token @BotFather gave you"
    ]


def test_the_readme_settings_table_shows_the_defaults() -> None:
    import tomllib

    from ore_conduit_telegram import TelegramConfig

    readme = (Path(__file__).parents[1] / "README.md").read_text()
    block = readme.split("```toml\n", 1)[1].split("```", 1)[0]
    section = tomllib.loads(block)["plugins"]["telegram"]
    assert TelegramConduit.load_config(section) == TelegramConfig()


@pytest.mark.slow  # starts ore
def test_ore_conduit_telegram_without_a_token_says_only_that(
    ore_isolated_env: Path, ore_nats_server: EmbeddedNatsServer
) -> None:
    result = run_ore("conduit", "telegram", "--nats", ore_nats_server.url, ORE_LOG__LEVEL="info")
    assert result.returncode == 1
    assert (result.stdout + result.stderr).splitlines() == [
        "Error: TELEGRAM_BOT_TOKEN is not set: export it (or set token in [plugins.telegram])"
    ]


@pytest.mark.slow  # starts ore
def test_ore_conduit_telegram_refuses_a_malformed_token_without_asking_telegram(
    ore_isolated_env: Path, ore_nats_server: EmbeddedNatsServer
) -> None:
    result = run_ore(
        "conduit",
        "telegram",
        "--nats",
        ore_nats_server.url,
        "--set",
        "api_url=http://127.0.0.1:9",  # asked, it would say it cannot reach Telegram
        TELEGRAM_BOT_TOKEN="123456789:AA-too-short",
    )
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "Error: TELEGRAM_BOT_TOKEN is not a bot token (digits, a colon and 35 characters of "
        "A-Z, a-z, 0-9, _ and -): copy the whole token @BotFather gave you"
    ]
