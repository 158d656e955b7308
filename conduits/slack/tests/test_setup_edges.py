"""Setup rough edges (issue 28, item 13): tokens of the wrong kind are refused before any
call, an unreachable Slack is said plainly, Bolt's token notice is gone, and
`ore conduit slack --help` lists the conduit's settings."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

import pytest
import structlog
from click.testing import CliRunner
from slack_sdk.web.async_client import AsyncWebClient

from ore_conduit_slack import MissingSecret, SlackConduit
from ore_conduit_slack.api import Ambiguous
from ore_conduit_slack.bolt import bolt_app
from ore_core.cli import main

if TYPE_CHECKING:
    from tests.conftest import Harness

SECRETS = ("SLACK_BOT_TOKEN", "SLACK_APP_TOKEN", "SLACK_SIGNING_SECRET")


@pytest.fixture(autouse=True)
def no_slack_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in SECRETS:
        monkeypatch.delenv(variable, raising=False)


async def run_briefly(slack: Harness, **settings: object) -> None:
    config = SlackConduit.load_config({"api_url": slack.fake.api_url, **settings})
    await asyncio.wait_for(SlackConduit().run(slack.core.client, config), 10)


@pytest.mark.asyncio
async def test_a_bot_token_of_another_kind_is_refused_before_any_call(slack: Harness) -> None:
    with pytest.raises(MissingSecret, match=r"^SLACK_BOT_TOKEN does not start with xoxb-"):
        await run_briefly(slack, bot_token="xoxp-a-user-token", app_token=slack.fake.app_token)
    assert slack.fake.methods() == []


@pytest.mark.asyncio
async def test_an_app_token_of_another_kind_is_refused_before_any_call(slack: Harness) -> None:
    with pytest.raises(MissingSecret, match=r"^SLACK_APP_TOKEN does not start with xapp-"):
        await run_briefly(slack, bot_token=slack.fake.bot_token, app_token="xoxb-not-an-app")
    assert slack.fake.methods() == []


def test_no_answer_to_a_read_asks_about_the_network() -> None:
    assert str(Ambiguous("auth.test", "ClientConnectorError")) == (
        "auth.test: no answer (ClientConnectorError); is the network up?"
    )


def test_no_answer_to_a_write_says_it_may_have_been_done() -> None:
    assert str(Ambiguous("chat.postMessage", "timeout")).endswith("it may have been carried out")


def test_bolts_token_notice_is_not_logged(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-same-token")  # Bolt reads it by itself
    inbound: Any = None  # the listeners are not called here
    with caplog.at_level(logging.WARNING):
        bolt_app(AsyncWebClient(token="xoxb-same-token"), inbound, "", "socket")
    assert [record.getMessage() for record in caplog.records] == []


def test_ore_conduit_slack_help_lists_its_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORE_LOAD_PLUGINS", "ore-conduit-slack")
    try:
        result = CliRunner().invoke(main, ["conduit", "slack", "--help"])
    finally:
        structlog.reset_defaults()
    assert result.exit_code == 0, result.output
    assert "Settings of conduit slack ([plugins.slack] in ore.toml" in result.output
    assert "  bot_token\n" in result.output
    assert "SLACK_BOT_TOKEN" in result.output
    assert "  mode (default: socket)\n" in result.output
