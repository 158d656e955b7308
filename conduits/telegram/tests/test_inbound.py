"""Telegram updates in: private chats, groups, topics, who is answered, offsets, commands."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from tests.conftest import Harness

pytestmark = pytest.mark.asyncio

DM = 1001
GROUP = -100200


async def test_a_private_message_is_answered_as_a_reply_to_it(tg: Harness) -> None:
    await tg.start()
    asked = await tg.fake.user_says(DM, "hello")
    await tg.shows(DM, ["echo: hello"])
    (answer,) = tg.fake.bot_messages(DM)
    assert answer.reply_to is asked
    assert await tg.user_texts() == [["hello"]]


async def test_the_offset_is_confirmed_only_once_the_core_has_the_message(tg: Harness) -> None:
    await tg.start()
    await tg.core.service.stop(grace=0)
    await tg.fake.user_says(DM, "patience")
    (update,) = tg.fake.pending_updates()
    await tg.until(lambda: tg.fake.handed == update["update_id"])
    assert tg.fake.confirmed < update["update_id"]
    await tg.restart_core()
    await tg.shows(DM, ["echo: patience"])
    await tg.until(lambda: tg.fake.confirmed >= update["update_id"])
    assert tg.fake.pending_updates() == []


async def test_an_update_handed_over_again_after_a_restart_is_answered_once(
    tg: Harness,
) -> None:
    await tg.start()
    await tg.fake.user_says(DM, "once")
    await tg.shows(DM, ["echo: once"])
    await tg.stop()
    tg.fake.confirmed = 0  # Telegram never got the confirmation: it hands it over again
    await tg.start()
    await tg.fake.user_says(DM, "twice?")
    await tg.shows(DM, ["echo: once", "echo: twice?"])
    assert await tg.user_texts() == [["once", "twice?"]]


async def test_in_a_group_only_messages_for_the_bot_are_answered(tg: Harness) -> None:
    await tg.start()
    fake = tg.fake
    await fake.user_says(GROUP, "chatter between people")
    await fake.user_says(GROUP, f"@{fake.username} hi bot")
    await tg.shows(GROUP, ["echo: hi bot"])
    answer = fake.bot_messages(GROUP)[0]
    await fake.user_says(GROUP, "a reply to the bot", reply_to=answer)
    await fake.user_says(GROUP, "/help@some_other_bot")
    await fake.user_says(GROUP, f"/meta@{fake.username}")
    await tg.until(lambda: len(fake.bot_messages(GROUP)) == 3)
    texts = fake.bot_texts(GROUP)
    assert texts[1] == "echo: a reply to the bot"
    assert (await tg.user_texts())[0][:2] == ["hi bot", "a reply to the bot"]
    assert all("chatter" not in t and "other_bot" not in t for t in texts)


async def test_the_bots_own_messages_and_other_bots_are_never_answered(tg: Harness) -> None:
    await tg.start()
    fake = tg.fake
    await fake.other_bot_says(DM, "I am a bot")
    await fake.other_bot_says(GROUP, f"@{fake.username} loop with me")
    await fake.user_says(DM, "sentinel")
    await tg.shows(DM, ["echo: sentinel"])
    assert fake.bot_texts(GROUP) == []
    assert await tg.user_texts() == [["sentinel"]]


async def test_an_allow_listed_bot_is_answered(tg: Harness) -> None:
    await tg.start(allow_bots=[7000009])
    await tg.fake.other_bot_says(DM, "ping", bot=7000009)
    await tg.shows(DM, ["echo: ping"])


async def test_a_reply_chain_in_a_group_is_one_thread_and_new_starts_another(
    tg: Harness,
) -> None:
    await tg.start()
    fake = tg.fake
    await fake.user_says(GROUP, f"@{fake.username} one")
    await tg.shows(GROUP, ["echo: one"])
    first_answer = fake.bot_messages(GROUP)[0]
    await fake.user_says(GROUP, "two", reply_to=first_answer)
    await tg.shows(GROUP, ["echo: one", "echo: two"])
    await fake.user_says(GROUP, f"/new@{fake.username}")
    await tg.until(lambda: len(fake.bot_messages(GROUP)) == 3)
    assert fake.bot_texts(GROUP)[2] == "New conversation started."
    await fake.user_says(GROUP, f"@{fake.username} three")
    await tg.until(lambda: len(fake.bot_messages(GROUP)) == 4)
    await fake.user_says(GROUP, "old chain", reply_to=first_answer)  # the first thread
    await tg.until(lambda: len(fake.bot_messages(GROUP)) == 5)
    assert await tg.user_texts() == [["one", "two", "old chain"], ["three"]]


async def test_new_in_a_private_chat_starts_a_new_thread(tg: Harness) -> None:
    await tg.start()
    await tg.fake.user_says(DM, "first")
    await tg.shows(DM, ["echo: first"])
    await tg.fake.user_says(DM, "/new")
    await tg.fake.user_says(DM, "second")
    await tg.shows(DM, ["echo: first", "New conversation started.", "echo: second"])
    assert await tg.user_texts() == [["first"], ["second"]]


async def test_each_forum_topic_is_a_thread_and_general_is_answered_without_a_thread_id(
    tg: Harness,
) -> None:
    fake = tg.fake
    fake.chat(GROUP, "supergroup", forum=True)
    topic = fake.open_topic(GROUP)
    await tg.start(groups="all")
    await fake.user_says(GROUP, "in the topic", topic=topic)
    await fake.user_says(GROUP, "in general")
    await tg.shows(GROUP, ["echo: in the topic"], topic=topic)
    await tg.shows(GROUP, ["echo: in general"], topic=0)
    assert fake.refused == []  # never sent to the General topic's id
    assert await tg.user_texts() == [["in general"], ["in the topic"]]


async def test_start_is_greeted_by_the_conduit_and_help_goes_to_the_core(tg: Harness) -> None:
    await tg.start(greeting="Hi from ore")
    await tg.fake.user_says(DM, "/start")
    await tg.shows(DM, ["Hi from ore"])
    await tg.fake.user_says(DM, "/help")
    await tg.until(lambda: len(tg.fake.bot_messages(DM)) == 2)
    assert tg.fake.bot_texts(DM)[1] == "echo: /help"  # the core got it (its commands answer)
    assert [c["command"] for c in tg.fake.commands] == ["new", "stop", "help"]


async def test_a_greeting_is_sent_once_even_when_its_update_comes_again(tg: Harness) -> None:
    await tg.start()
    await tg.fake.user_says(DM, "/start")
    await tg.until(lambda: len(tg.fake.bot_messages(DM)) == 1)
    await tg.stop()
    tg.fake.confirmed = 0
    await tg.start()
    await tg.fake.user_says(DM, "after")
    await tg.until(lambda: len(tg.fake.bot_messages(DM)) == 2)
    assert tg.fake.bot_texts(DM)[1] == "echo: after"


async def test_a_file_of_a_forbidden_type_is_not_fetched_and_its_caption_is_answered(
    tg: Harness,
) -> None:
    await tg.start()
    await tg.fake.user_sends_file(
        DM, b"PK secret", "what is in it?", file_name="a.zip", mime_type="application/zip"
    )
    await tg.until(lambda: len(tg.fake.bot_texts(DM)) == 2)
    notice, answer = tg.fake.bot_texts(DM)
    assert notice.startswith("a.zip: files of type application/zip are not allowed here")
    assert answer == "echo: what is in it?"
    assert tg.fake.calls("getFile") == []
    assert await tg.user_texts() == [["what is in it?"]]
