"""Matrix reactions in ore's words (issue 39): a user's `m.reaction` arrives as a
`Reaction` and its redaction as the reaction taken back; `react` annotates with the
bot's own and redacts it, once each; the bot's own never arrives."""

from __future__ import annotations

import pytest

from ore_conduit_matrix.testing import ALICE, BOT, FakeMatrix
from ore_core.conduit import Delete, Message, Part, Reaction

pytestmark = pytest.mark.asyncio


async def test_a_users_reaction_arrives_as_a_reaction_on_its_message(
    hs: FakeMatrix, adapters
) -> None:
    room = await hs.create_room()
    adapter = await adapters()
    said = await hs.user_says(room, "hello")
    await adapter.next()
    reacted = await hs.user_reacts(room, said, "👍")
    event = await adapter.next()
    assert isinstance(event, Reaction)
    assert (event.conversation, event.platform_id, event.target) == (room, reacted, said)
    assert (event.emoji, event.removed, event.sender.id) == ("👍", False, ALICE)


async def test_the_redaction_of_a_reaction_arrives_as_the_reaction_taken_back(
    hs: FakeMatrix, adapters
) -> None:
    room = await hs.create_room()
    adapter = await adapters()
    said = await hs.user_says(room, "hello")
    await adapter.next()
    reacted = await hs.user_reacts(room, said, "👍")
    await adapter.next()
    redaction = await hs.user_redacts(room, reacted)
    taken_back = await adapter.next()
    assert isinstance(taken_back, Reaction)
    assert not isinstance(taken_back, Delete)
    assert (taken_back.removed, taken_back.target, taken_back.emoji) == (True, said, "👍")
    assert taken_back.platform_id == redaction


async def test_react_annotates_once_and_takes_it_back_once(hs: FakeMatrix, adapters) -> None:
    room = await hs.create_room()
    adapter = await adapters()
    copy = await adapter.platform.post(room, Part("a copy"), "k1")
    await adapter.platform.react(room, copy, "🎉", True)
    await adapter.platform.react(room, copy, "🎉", True)
    assert hs.reactions_on(copy) == {"🎉": [BOT]}
    await adapter.platform.react(room, copy, "🎉", False)
    await adapter.platform.react(room, copy, "🎉", False)
    assert hs.reactions_on(copy) == {}


async def test_a_reaction_made_again_after_taken_back_shows_again(hs: FakeMatrix, adapters) -> None:
    room = await hs.create_room()
    adapter = await adapters()
    copy = await adapter.platform.post(room, Part("a copy"), "k1")
    for add in (True, False, True):
        await adapter.platform.react(room, copy, "🎉", add)
    assert hs.reactions_on(copy) == {"🎉": [BOT]}


async def test_the_bots_own_reaction_never_arrives(hs: FakeMatrix, adapters) -> None:
    room = await hs.create_room()
    adapter = await adapters()
    copy = await adapter.platform.post(room, Part("a copy"), "k1")
    await adapter.platform.react(room, copy, "🎉", True)
    said = await hs.user_says(room, "after it")
    event = await adapter.next()
    assert isinstance(event, Message)
    assert event.platform_id == said
