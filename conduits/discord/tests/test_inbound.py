"""Discord's events arrive in ore's words: messages, replies, edits, deletes, commands."""

from __future__ import annotations

import asyncio
from typing import Any

from ore_conduit_discord.testing import DM, GENERAL, GUILD
from ore_core.conduit import Command, Delete, Edit, Message, Part, Sender


async def test_a_channel_message_arrives_as_a_message_of_the_channel(discord: Any) -> None:
    await discord.start()
    sent = await discord.fake.user_says(GENERAL, "hello")
    event = await discord.next_event()
    assert isinstance(event, Message)
    assert (event.conversation, event.platform_id) == (f"{GUILD}:{GENERAL}", sent)
    assert (event.text, event.sender.name) == ("hello", "Alice")


async def test_a_direct_message_is_a_conversation_of_its_own(discord: Any) -> None:
    await discord.start()
    await discord.fake.user_says(DM, "psst")
    event = await discord.next_event()
    assert event.conversation == f"@me:{DM}"


async def test_a_reply_names_the_message_it_answers(discord: Any) -> None:
    await discord.start()
    first = await discord.fake.user_says(GENERAL, "one")
    await discord.fake.user_says(GENERAL, "two", reply_to=first)
    await discord.next_event()
    reply = await discord.next_event()
    assert isinstance(reply, Message)
    assert reply.reply_to == first


async def test_two_edits_of_a_message_are_two_edit_events(discord: Any) -> None:
    await discord.start()
    sent = await discord.fake.user_says(GENERAL, "helo")
    await discord.next_event()
    await discord.fake.user_edits(GENERAL, sent, "hello")
    await discord.fake.user_edits(GENERAL, sent, "hello!")
    edits = [await discord.next_event(), await discord.next_event()]
    assert all(isinstance(e, Edit) and e.target == sent for e in edits)
    assert [e.text for e in edits if isinstance(e, Edit)] == ["hello", "hello!"]
    assert edits[0].platform_id != edits[1].platform_id


async def test_a_deleted_message_arrives_as_a_delete(discord: Any) -> None:
    await discord.start()
    sent = await discord.fake.user_says(GENERAL, "oops")
    await discord.next_event()
    await discord.fake.user_deletes(GENERAL, sent)
    event = await discord.next_event()
    assert isinstance(event, Delete)
    assert event.target == sent


async def test_the_bots_own_posts_webhook_copies_and_deletes_are_no_events(discord: Any) -> None:
    platform = await discord.start()
    conversation = f"{GUILD}:{GENERAL}"
    answer = await platform.post(conversation, Part("an answer"), "key-1")
    await platform.post(conversation, Part("a copy", sender=Sender("bob")), "key-2")
    await platform.edit(conversation, answer, Part("an answer, edited"))
    await platform.delete(conversation, answer)
    await discord.fake.user_says(GENERAL, "mine")
    event = await discord.next_event()
    assert isinstance(event, Message)
    assert event.text == "mine"


async def test_the_core_commands_are_registered_as_slash_commands(discord: Any) -> None:
    await discord.start()
    assert {c["name"] for c in discord.fake.commands} == {"new", "stop"}


async def test_a_slash_command_is_answered_once_the_core_has_it(discord: Any) -> None:
    await discord.start()
    interaction = await discord.fake.user_command(GENERAL, "new")
    event = await discord.next_event()
    assert isinstance(event, Command)
    assert event.name == "new"
    await asyncio.sleep(0)
    assert interaction not in discord.fake.interaction_replies
    await event.done()
    assert discord.fake.interaction_replies[interaction]["type"] == 4
