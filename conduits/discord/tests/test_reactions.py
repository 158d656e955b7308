"""Discord's reactions in ore's words (issue 39): a user's reaction arrives as a
`Reaction`, the bot's own never does, and `react` adds and takes back the bot's own."""

from __future__ import annotations

from typing import Any

from ore_conduit_discord.testing import GENERAL, GUILD
from ore_conduit_discord.testing.fake import BOT_ID
from ore_core.conduit import Part, Reaction


async def test_a_users_reaction_arrives_as_a_reaction_on_its_message(discord: Any) -> None:
    await discord.start()
    sent = await discord.fake.user_says(GENERAL, "hello")
    await discord.next_event()
    await discord.fake.user_reacts(GENERAL, sent, "👍")
    event = await discord.next_event()
    assert isinstance(event, Reaction)
    assert (event.conversation, event.target, event.emoji) == (f"{GUILD}:{GENERAL}", sent, "👍")
    assert (event.sender.name, event.removed) == ("Alice", False)


async def test_a_reaction_taken_back_arrives_as_a_removal_with_its_own_id(discord: Any) -> None:
    await discord.start()
    sent = await discord.fake.user_says(GENERAL, "hello")
    await discord.next_event()
    await discord.fake.user_reacts(GENERAL, sent, "👍")
    await discord.fake.user_reacts(GENERAL, sent, "👍", remove=True)
    added, removed = await discord.next_event(), await discord.next_event()
    assert isinstance(removed, Reaction)
    assert removed.removed
    assert removed.sender.name == "Alice"  # Discord's removal names no one: remembered
    assert added.platform_id != removed.platform_id


async def test_a_custom_emoji_is_named_by_name_and_id(discord: Any) -> None:
    await discord.start()
    sent = await discord.fake.user_says(GENERAL, "hello")
    await discord.next_event()
    await discord.fake.user_reacts(GENERAL, sent, "ore:1500000000000000042")
    event = await discord.next_event()
    assert isinstance(event, Reaction)
    assert event.emoji == "ore:1500000000000000042"


async def test_react_adds_and_takes_back_the_bots_own_reaction_once(discord: Any) -> None:
    platform = await discord.start()
    conversation = f"{GUILD}:{GENERAL}"
    message = await platform.post(conversation, Part("a copy"), "k1")
    await platform.react(conversation, message, "🎉", True)
    await platform.react(conversation, message, "🎉", True)
    assert discord.fake.reactions_on(GENERAL, message) == {"🎉": [BOT_ID]}
    await platform.react(conversation, message, "🎉", False)
    await platform.react(conversation, message, "🎉", False)
    assert discord.fake.reactions_on(GENERAL, message) == {}


async def test_the_bots_own_reaction_never_arrives(discord: Any) -> None:
    platform = await discord.start()
    conversation = f"{GUILD}:{GENERAL}"
    message = await platform.post(conversation, Part("a copy"), "k1")
    await platform.react(conversation, message, "🎉", True)
    sent = await discord.fake.user_says(GENERAL, "after it")
    event = await discord.next_event()  # the bot's reaction came first: skipped
    assert not isinstance(event, Reaction)
    assert event.platform_id == sent
