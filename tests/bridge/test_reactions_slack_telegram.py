"""A reaction crosses a linked thread Slack <-> Telegram (issue 39): both conduits on the
engine, each on its fake, the kit's core on a real nats-server. A reaction on Slack shows
on the Telegram copy as the bot's and back, a removal takes it back on the other side,
and no reaction ever starts a model turn."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from ore_conduit_slack import SlackConduit
from ore_conduit_slack.testing import FakeMessage, FakeSlack
from ore_conduit_telegram import TelegramConduit
from ore_conduit_telegram.testing import FakeTelegram
from ore_conduit_telegram.testing.fake import FakeMessage as TelegramMessage
from ore_core.conduit import ControlClient
from ore_core.session.reactions import reactions_of
from ore_core.testing.conduit_conformance import ECHO_PREFIX, ConduitCore, StartConduit
from tests.bridge.gateway import PATIENCE
from tests.bus.raw import eventually

pytestmark = [pytest.mark.asyncio, pytest.mark.slow, pytest.mark.timeout(180)]

CHANNEL = "CGENERAL"  # the fake Slack's channel
CHAT = 3001  # the Telegram chat


@dataclass
class Bridge:
    """The two fakes, the Slack thread's root, the ore thread, and the core."""

    core: ConduitCore
    slack: FakeSlack
    telegram: FakeTelegram
    root: FakeMessage
    thread: str

    async def question(self, text: str) -> tuple[FakeMessage, TelegramMessage]:
        """Alice asks in the Slack thread; (her message, its copy on Telegram) once the
        copy is shown and reported and the answer is back on Slack."""
        said = await self.slack.user_says(CHANNEL, text, thread_ts=self.root.ts)
        answer = f"{ECHO_PREFIX}{text}"
        await self.slack.wait_until(
            lambda: answer in self.slack.answers(CHANNEL, self.root.ts), PATIENCE
        )

        def copies() -> list[TelegramMessage]:
            label = f"(slack): {text}"
            return [m for m in self.telegram.bot_messages(CHAT) if m.text.endswith(label)]

        await self.telegram.wait_until(lambda: len(copies()) == 1, PATIENCE)
        (copy,) = copies()
        telegram = self.core.client_for("telegram")

        async def reported() -> bool:  # the copy is posted first, then reported
            return await telegram.delivery_lookup(f"{CHAT}:{copy.message_id}") is not None

        await eventually(reported)
        return said, copy

    async def reactions_in_core(self, said: FakeMessage) -> dict[str, list[str]]:
        turns = await self.core.client_for("slack").turns(self.thread)
        return reactions_of(next(t for t in turns if t.event_id.endswith(said.ts)))


@pytest.fixture
async def bridge(
    ore_conduit_core: ConduitCore, ore_start_conduit: StartConduit, tmp_path: Path
) -> AsyncIterator[Bridge]:
    slack = await FakeSlack().start()
    telegram = await FakeTelegram().start()
    try:
        telegram.chat(CHAT, "private")
        tg_settings = telegram.conduit_settings(str(tmp_path / "tg"), flush_interval=0.05)
        await ore_start_conduit(SlackConduit, slack.conduit_settings())
        await ore_start_conduit(TelegramConduit, tg_settings)
        await slack.wait_connected(1, PATIENCE)
        root = await slack.user_says(CHANNEL, "start")
        await slack.wait_until(lambda: len(slack.answers(CHANNEL, root.ts)) == 1, PATIENCE)
        control = ControlClient.beside(ore_conduit_core.client)
        (thread,) = (await control.call("threads.list", {"namespace": "slack"}))["threads"]
        endpoint = {"namespace": "telegram", "key": "telegram.thread", "value": f"{CHAT}:0:0"}
        await control.call("links.add", {"thread": thread, "endpoint": endpoint})
        yield Bridge(ore_conduit_core, slack, telegram, root, thread)
    finally:
        await telegram.close()
        await slack.close()


async def test_a_reaction_on_slack_shows_on_the_telegram_copy_as_the_bots(bridge: Bridge) -> None:
    said, copy = await bridge.question("hello")
    await bridge.slack.user_reacts(said, "+1")
    await bridge.telegram.wait_until(lambda: copy.bot_reaction == ["👍"], PATIENCE)
    assert await bridge.reactions_in_core(said) == {"👍": ["slack:UALICE"]}


async def test_a_reaction_on_the_telegram_copy_shows_on_the_slack_message(bridge: Bridge) -> None:
    said, copy = await bridge.question("hello")
    await bridge.telegram.user_reacts(copy, "🎉")
    await bridge.slack.wait_until(lambda: said.reactions == {"tada"}, PATIENCE)
    assert await bridge.reactions_in_core(said) == {"🎉": ["telegram:1001"]}


async def test_a_removal_on_slack_takes_the_bots_reaction_back_on_telegram(
    bridge: Bridge,
) -> None:
    said, copy = await bridge.question("hello")
    await bridge.slack.user_reacts(said, "+1")
    await bridge.telegram.wait_until(lambda: copy.bot_reaction == ["👍"], PATIENCE)
    await bridge.slack.user_reacts(said, "+1", remove=True)
    await bridge.telegram.wait_until(lambda: copy.bot_reaction == [], PATIENCE)
    assert await bridge.reactions_in_core(said) == {}


async def test_a_removal_on_telegram_takes_the_bots_reaction_back_on_slack(
    bridge: Bridge,
) -> None:
    said, copy = await bridge.question("hello")
    await bridge.telegram.user_reacts(copy, "🎉")
    await bridge.slack.wait_until(lambda: said.reactions == {"tada"}, PATIENCE)
    await bridge.telegram.user_reacts(copy)
    await bridge.slack.wait_until(lambda: said.reactions == set(), PATIENCE)
    assert await bridge.reactions_in_core(said) == {}


async def test_reactions_on_either_side_start_no_model_turn(bridge: Bridge) -> None:
    said, copy = await bridge.question("hello")
    gated = bridge.core.processor.gate()  # from now on every model turn is held and counted
    await bridge.slack.user_reacts(said, "+1")
    await bridge.telegram.user_reacts(copy, "🎉")
    await bridge.slack.wait_until(lambda: said.reactions == {"tada"}, PATIENCE)
    await bridge.telegram.wait_until(lambda: copy.bot_reaction == ["👍"], PATIENCE)
    assert gated.calls == 0
    await bridge.slack.user_says(CHANNEL, "a question", thread_ts=bridge.root.ts)
    await asyncio.wait_for(gated.started.wait(), PATIENCE)  # the count counts a turn
    assert gated.calls == 1
