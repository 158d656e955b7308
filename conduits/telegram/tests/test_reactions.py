"""Telegram's reactions (issue 39): the bot asks for `message_reaction` updates; a
user's reaction lands on the turn its message shows, a removal (or a change to another
emoji) takes it back, the bot's own answer can be reacted to, and no reaction starts a
model turn. Real core and nats-server, the fake Bot API. A reaction shows nothing in
the chat: the tests read the core's store until it holds what they wait for (bounded
by TIMEOUT)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING

import pytest

from ore_conduit_telegram.reactions import changes, telegram_emoji
from ore_core import Role
from ore_core.session.reactions import Reactions, reactions_of

if TYPE_CHECKING:
    from ore_core.turn import Turn
    from tests.conftest import Harness

pytestmark = pytest.mark.asyncio

DM = 1001
ALICE = "telegram:1001"
TIMEOUT = 10.0


async def turns(tg: Harness) -> list[Turn]:
    (thread,) = await tg.threads()
    return list(thread.turns())


async def reacted(tg: Harness, which: Callable[[list[Turn]], Turn], expected: Reactions) -> None:
    """Until the turn `which` picks has the `expected` reactions (TimeoutError after
    TIMEOUT)."""
    async with asyncio.timeout(TIMEOUT):
        while True:
            if reactions_of(which(await turns(tg))) == expected:
                return
            await asyncio.sleep(0.05)


def first(found: list[Turn]) -> Turn:
    return found[0]


def answer(found: list[Turn]) -> Turn:
    return next(t for t in found if t.role == Role.ASSISTANT)


async def test_the_bot_asks_for_reaction_updates(tg: Harness) -> None:
    await tg.start()
    await tg.until(lambda: tg.fake.polls > 0)
    assert "message_reaction" in tg.fake.allowed_updates


async def test_a_users_reaction_lands_on_the_turn_of_the_message(tg: Harness) -> None:
    await tg.start()
    asked = await tg.fake.user_says(DM, "hello")
    await tg.shows(DM, ["echo: hello"])
    await tg.fake.user_reacts(asked, "👍")
    await reacted(tg, first, {"👍": [ALICE]})


async def test_a_reaction_taken_back_leaves_the_turn(tg: Harness) -> None:
    await tg.start()
    asked = await tg.fake.user_says(DM, "hello")
    await tg.shows(DM, ["echo: hello"])
    await tg.fake.user_reacts(asked, "🎉")
    await reacted(tg, first, {"🎉": [ALICE]})
    await tg.fake.user_reacts(asked)
    await reacted(tg, first, {})


async def test_a_changed_reaction_is_one_taken_back_and_one_added(tg: Harness) -> None:
    await tg.start()
    asked = await tg.fake.user_says(DM, "hello")
    await tg.shows(DM, ["echo: hello"])
    await tg.fake.user_reacts(asked, "🎉")
    await reacted(tg, first, {"🎉": [ALICE]})
    await tg.fake.user_reacts(asked, "🔥")
    await reacted(tg, first, {"🔥": [ALICE]})


async def test_a_reaction_on_the_bots_answer_lands_on_the_answer_turn(tg: Harness) -> None:
    await tg.start()
    await tg.fake.user_says(DM, "hello")
    await tg.shows(DM, ["echo: hello"])
    (bot_answer,) = tg.fake.bot_messages(DM)
    await tg.fake.user_reacts(bot_answer, "❤")
    await reacted(tg, answer, {"❤": [ALICE]})


async def test_a_reaction_never_starts_a_model_turn(tg: Harness) -> None:
    await tg.start()
    asked = await tg.fake.user_says(DM, "hello")
    await tg.shows(DM, ["echo: hello"])
    await tg.fake.user_reacts(asked, "👀")
    await reacted(tg, first, {"👀": [ALICE]})
    await tg.fake.user_says(DM, "next")
    await tg.shows(DM, ["echo: hello", "echo: next"])
    roles = [t.role for t in await turns(tg)]
    assert roles == [Role.USER, Role.ASSISTANT, Role.USER, Role.ASSISTANT]


async def test_an_update_says_what_was_added_and_what_taken_back() -> None:
    update = {
        "old_reaction": [{"type": "emoji", "emoji": "👍"}, {"type": "emoji", "emoji": "🔥"}],
        "new_reaction": [{"type": "emoji", "emoji": "🔥"}, {"type": "custom_emoji", "id": "5"}],
    }
    assert changes(update) == ([], ["👍"])


async def test_only_telegrams_reaction_emoji_can_be_the_bots() -> None:
    assert telegram_emoji("❤️") == "❤"  # the same heart, without its variation selector
    assert telegram_emoji("👍") == "👍"
    assert telegram_emoji("🚀") is None
