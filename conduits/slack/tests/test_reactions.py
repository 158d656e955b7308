"""Slack's reactions (issue 39): a user's reaction lands on the turn its message shows,
a removal takes it back, the bot's own answer can be reacted to, the bot's own
reactions never arrive, and no reaction starts a model turn. Real core and nats-server,
the fake Slack. A reaction shows nothing in Slack: the tests read the core's store
until it holds what they wait for (bounded by the harness's TIMEOUT)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING

import pytest

from ore_conduit_slack.config import SlackConfig
from ore_conduit_slack.inbound import Decoder, Identity
from ore_conduit_slack.platform import SlackPlatform
from ore_conduit_slack.reactions import emoji_of, name_of
from ore_conduit_slack.testing.fake import BOT_USER
from ore_core import Role
from ore_core.session.reactions import Reactions, reactions_of

if TYPE_CHECKING:
    from ore_core.turn import Turn
    from tests.conftest import Harness

pytestmark = pytest.mark.asyncio

CHANNEL = "CGENERAL"
TIMEOUT = 10.0


async def turns(slack: Harness) -> list[Turn]:
    (thread,) = await slack.threads()
    return list(thread.turns())


async def reacted(
    slack: Harness, which: Callable[[list[Turn]], Turn], expected: Reactions
) -> Reactions:
    """The reactions of the turn `which` picks, once they are `expected` (TimeoutError
    after TIMEOUT)."""
    async with asyncio.timeout(TIMEOUT):
        while True:
            seen = reactions_of(which(await turns(slack)))
            if seen == expected:
                return seen
            await asyncio.sleep(0.05)


def first(found: list[Turn]) -> Turn:
    return found[0]


def answer(found: list[Turn]) -> Turn:
    return next(t for t in found if t.role == Role.ASSISTANT)


async def test_a_users_reaction_lands_on_the_turn_of_the_message(slack: Harness) -> None:
    await slack.start()
    root = await slack.fake.user_says(CHANNEL, "hello")
    await slack.answers(CHANNEL, root)
    await slack.fake.user_reacts(root, "+1")
    assert await reacted(slack, first, {"👍": ["slack:UALICE"]}) == {"👍": ["slack:UALICE"]}


async def test_a_reaction_taken_back_leaves_the_turn(slack: Harness) -> None:
    await slack.start()
    root = await slack.fake.user_says(CHANNEL, "hello")
    await slack.answers(CHANNEL, root)
    await slack.fake.user_reacts(root, "tada")
    await reacted(slack, first, {"🎉": ["slack:UALICE"]})
    await slack.fake.user_reacts(root, "tada", remove=True)
    assert await reacted(slack, first, {}) == {}


async def test_a_reaction_on_the_bots_answer_lands_on_the_answer_turn(slack: Harness) -> None:
    await slack.start()
    root = await slack.fake.user_says(CHANNEL, "hello")
    await slack.answers(CHANNEL, root)
    (bot_answer,) = slack.fake.bot_messages(CHANNEL, root.ts)
    await slack.fake.user_reacts(bot_answer, "heart")
    expected = {"❤️": ["slack:UALICE"]}
    assert await reacted(slack, answer, expected) == expected


async def test_a_reaction_never_starts_a_model_turn(slack: Harness) -> None:
    await slack.start()
    root = await slack.fake.user_says(CHANNEL, "hello")
    await slack.answers(CHANNEL, root)
    await slack.fake.user_reacts(root, "eyes")
    await reacted(slack, first, {"👀": ["slack:UALICE"]})
    await slack.fake.user_says(CHANNEL, "next", thread_ts=root.ts)
    assert await slack.answers(CHANNEL, root, 2) == ["echo: hello", "echo: next"]
    roles = [t.role for t in await turns(slack)]
    assert roles == [Role.USER, Role.ASSISTANT, Role.USER, Role.ASSISTANT]


async def test_the_bots_own_reaction_is_no_event(slack: Harness) -> None:
    config = slack.conduit_class.load_config(slack.settings())
    assert isinstance(config, SlackConfig)
    platform = SlackPlatform(config)
    decoder = Decoder(platform.api, config, Identity(BOT_USER, slack.fake.bot_id, "T"))
    root = slack.fake.add_message(CHANNEL, "hello", user="UALICE")
    own = slack.fake.callback(slack.fake.reaction_event(root, "warning", BOT_USER))
    users = slack.fake.callback(slack.fake.reaction_event(root, "warning", "UALICE"))
    assert decoder.decode(own) is None
    assert decoder.decode(users) is not None


async def test_a_custom_emoji_travels_as_its_name_and_comes_back_as_it() -> None:
    assert emoji_of("party_parrot") == ":party_parrot:"
    assert name_of(":party_parrot:") == "party_parrot"
    assert emoji_of("+1::skin-tone-3") == "👍"
    assert emoji_of(name_of("🎉")) == "🎉"


async def test_react_adds_and_takes_back_the_bots_reaction_once(slack: Harness) -> None:
    config = slack.conduit_class.load_config(slack.settings())
    assert isinstance(config, SlackConfig)
    platform = SlackPlatform(config)
    root = slack.fake.add_message(CHANNEL, "hello", user="UALICE")
    conversation = f"-:{slack.fake.team}:{CHANNEL}:{root.ts}"
    message = f"slack:-:{slack.fake.team}:{CHANNEL}:{root.ts}"
    await platform.react(conversation, message, "🎉", True)
    await platform.react(conversation, message, "🎉", True)  # already_reacted: as asked
    assert root.reactions == {"tada"}
    await platform.react(conversation, message, "🎉", False)
    await platform.react(conversation, message, "🎉", False)  # no_reaction: as asked
    assert root.reactions == set()
