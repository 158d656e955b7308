"""What the adapter reads from `/sync`: the rooms' events in ore's words, and the sync
token stored only once the engine confirmed them."""

from __future__ import annotations

import pytest

from ore_conduit_matrix.testing import ALICE, BOT, FakeMatrix
from ore_core.conduit import Command, Delete, Edit, Message

pytestmark = pytest.mark.asyncio


async def test_a_message_arrives_with_its_event_id_and_the_senders_name(
    hs: FakeMatrix, adapters
) -> None:
    room = await hs.create_room()
    adapter = await adapters()
    said = await hs.user_says(room, "hello")
    event = await adapter.next()
    assert isinstance(event, Message)
    assert (event.conversation, event.platform_id, event.text) == (room, said, "hello")
    assert (event.sender.name, event.sender.id) == ("Alice", ALICE)


async def test_a_message_in_a_thread_is_the_threads_conversation(hs: FakeMatrix, adapters) -> None:
    room = await hs.create_room()
    adapter = await adapters()
    root = await hs.user_says(room, "root")
    await hs.user_says(room, "in the thread", thread=root)
    assert (await adapter.next()).conversation == room
    inside = await adapter.next()
    assert isinstance(inside, Message)
    assert (inside.conversation, inside.reply_to) == (f"{room}|{root}", "")


async def test_a_reply_names_the_message_it_answers_without_the_quoted_fallback(
    hs: FakeMatrix, adapters
) -> None:
    room = await hs.create_room()
    adapter = await adapters()
    first = await hs.user_says(room, "first")
    await hs.user_says(room, "> <@alice:fake.local> first\n\nsecond", reply_to=first)
    await adapter.next()
    reply = await adapter.next()
    assert isinstance(reply, Message)
    assert (reply.reply_to, reply.text) == (first, "second")


async def test_an_edit_arrives_as_an_edit_of_its_target_in_the_targets_thread(
    hs: FakeMatrix, adapters
) -> None:
    room = await hs.create_room()
    adapter = await adapters()
    root = await hs.user_says(room, "root")
    inside = await hs.user_says(room, "typo", thread=root)
    edit = await hs.user_edits(room, inside, "fixed")
    await adapter.next()
    await adapter.next()
    event = await adapter.next()
    assert isinstance(event, Edit)
    assert (event.conversation, event.platform_id, event.target, event.text) == (
        f"{room}|{root}",
        edit,
        inside,
        "fixed",
    )


async def test_an_edit_of_a_message_from_before_the_state_finds_its_thread_on_the_server(
    hs: FakeMatrix, adapters
) -> None:
    room = await hs.create_room()
    root = await hs.user_says(room, "root")
    inside = await hs.user_says(room, "typo", thread=root)  # said before the bot's first run
    adapter = await adapters()
    await hs.user_edits(room, inside, "fixed")
    event = await adapter.next()
    assert isinstance(event, Edit)
    assert event.conversation == f"{room}|{root}"


async def test_a_redaction_arrives_as_a_delete_in_the_targets_thread(
    hs: FakeMatrix, adapters
) -> None:
    room = await hs.create_room()
    adapter = await adapters()
    root = await hs.user_says(room, "root")
    inside = await hs.user_says(room, "oops", thread=root)
    await adapter.next()
    await adapter.next()
    redaction = await hs.user_redacts(room, inside)
    event = await adapter.next()
    assert event == Delete(conversation=f"{room}|{root}", platform_id=redaction, target=inside)


async def test_a_prefixed_word_arrives_as_a_command(hs: FakeMatrix, adapters) -> None:
    room = await hs.create_room()
    adapter = await adapters()
    await hs.user_says(room, "!new a fresh start")
    event = await adapter.next()
    assert isinstance(event, Command)
    assert (event.name, event.args) == ("new", "a fresh start")


async def test_the_bots_own_messages_and_other_bots_notices_are_not_read(
    hs: FakeMatrix, adapters
) -> None:
    room = await hs.create_room()
    adapter = await adapters()
    await hs.user_says(room, "me", user=BOT)
    await hs.user_sends(room, "m.room.message", {"msgtype": "m.notice", "body": "a bot"})
    await hs.user_says(room, "a person")
    event = await adapter.next()
    assert isinstance(event, Message)
    assert event.text == "a person"


async def test_what_rooms_said_before_the_first_run_is_not_answered(
    hs: FakeMatrix, adapters
) -> None:
    room = await hs.create_room()
    await hs.user_says(room, "long ago")
    adapter = await adapters()
    await hs.user_says(room, "now")
    event = await adapter.next()
    assert isinstance(event, Message)
    assert event.text == "now"


async def test_an_invite_is_accepted_and_the_room_then_read(hs: FakeMatrix, adapters) -> None:
    room = await hs.create_room(bot="invite")
    adapter = await adapters()
    await hs.wait_until(lambda: hs.stream.rooms[room].membership(BOT) == "join")
    await hs.user_says(room, "welcome")
    event = await adapter.next()
    assert (event.conversation, getattr(event, "text", "")) == (room, "welcome")


async def test_an_invite_from_someone_not_listed_is_left_alone(hs: FakeMatrix, adapters) -> None:
    room = await hs.create_room(bot="invite")
    await adapters(invites_from=["@bob:fake.local"])  # its first sync carried the invite
    assert hs.stream.rooms[room].membership(BOT) == "invite"


async def test_an_unconfirmed_event_arrives_again_after_a_restart(hs: FakeMatrix, adapters) -> None:
    room = await hs.create_room()
    first = await adapters()
    said = await hs.user_says(room, "not yet stored")
    assert (await first.next()).platform_id == said
    await first.close()  # killed before the core acknowledged it
    again = await adapters()
    assert (await again.next()).platform_id == said


async def test_a_confirmed_event_does_not_arrive_again_after_a_restart(
    hs: FakeMatrix, adapters
) -> None:
    room = await hs.create_room()
    first = await adapters()
    await hs.user_says(room, "stored")
    await (await first.next()).done()
    await first.close()
    again = await adapters()
    later = await hs.user_says(room, "later")
    assert (await again.next()).platform_id == later


async def test_the_token_waits_for_every_event_of_its_batch(hs: FakeMatrix, adapters) -> None:
    room = await hs.create_room()
    first = await adapters()
    one = await hs.user_says(room, "one")
    await hs.user_says(room, "two")
    a, b = await first.next(), await first.next()
    await b.done()  # the engine may confirm out of order
    await first.close()
    again = await adapters()
    assert (await again.next()).platform_id == one
    assert a.platform_id == one


async def test_a_sync_lost_to_a_server_error_or_a_dropped_connection_is_tried_again(
    hs: FakeMatrix, adapters
) -> None:
    room = await hs.create_room()
    adapter = await adapters()
    hs.fail_next("sync", status=502, errcode="M_UNKNOWN", error="Bad Gateway")
    hs.drop_next("sync")
    hs.fail_next("sync", retry_after_ms=10)
    await hs.user_says(room, "still here")
    event = await adapter.next()
    assert getattr(event, "text", "") == "still here"
