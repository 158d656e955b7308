"""What the engine asks of Discord: posts once per key, copies under the sender's name,
edits and deletes, and every failure in the class the engine acts on."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest

from ore_conduit_discord.testing import GENERAL, GUILD, RANDOM
from ore_core.conduit import Part, RateLimited, Refused, Sender, Transient, part_key

HERE = f"{GUILD}:{GENERAL}"


async def test_a_post_repeated_with_its_key_shows_one_message(discord: Any) -> None:
    platform = await discord.start()
    key = part_key("turn-1", 0)
    first = await platform.post(HERE, Part("the answer"), key)
    again = await platform.post(HERE, Part("the answer"), key)
    assert first == again
    assert discord.fake.bot_texts(GENERAL) == ["the answer"]


async def test_a_post_repeated_with_its_key_and_a_longer_text_shows_the_longer_text(
    discord: Any,
) -> None:
    # A crash after the first post of a streamed answer: the restart posts the whole
    # answer with the same key, and Discord answers with the message the key made.
    platform = await discord.start()
    key = part_key("turn-1", 0)
    first = await platform.post(HERE, Part("the"), key)
    again = await platform.post(HERE, Part("the answer"), key)
    assert first == again
    assert discord.fake.bot_texts(GENERAL) == ["the answer"]


async def test_posts_of_other_parts_are_other_messages(discord: Any) -> None:
    platform = await discord.start()
    for part in range(3):
        await platform.post(HERE, Part(f"part {part}"), part_key("turn-1", part))
    assert discord.fake.bot_texts(GENERAL) == ["part 0", "part 1", "part 2"]


async def test_a_post_dropped_after_discord_made_it_is_not_doubled_by_its_retry(
    discord: Any,
) -> None:
    platform = await discord.start()
    discord.fake.drop_next("post", commit=True)
    with pytest.raises(Transient):
        await platform.post(HERE, Part("once"), part_key("turn-2", 0))
    await platform.post(HERE, Part("once"), part_key("turn-2", 0))
    assert discord.fake.bot_texts(GENERAL) == ["once"]


async def test_a_reply_is_threaded_under_its_message(discord: Any) -> None:
    platform = await discord.start()
    asked = await discord.fake.user_says(GENERAL, "question")
    answer = await platform.post(HERE, Part("answer", reply_to=asked), "k")
    assert [s.reply_to for s in discord.fake.seen(GENERAL) if s.id == answer] == [asked]


async def test_a_relayed_copy_shows_its_senders_name_through_the_webhook(discord: Any) -> None:
    platform = await discord.start()
    copy = await platform.post(HERE, Part("hi from slack", sender=Sender("Bob")), "k")
    await platform.edit(HERE, copy, Part("hi from slack, edited", sender=Sender("Bob")))
    assert [(s.author, s.text) for s in discord.fake.seen(GENERAL)] == [
        ("Bob", "hi from slack, edited")
    ]


async def test_an_answer_is_edited_and_deleted_in_place(discord: Any) -> None:
    platform = await discord.start()
    answer = await platform.post(HERE, Part("draft"), "k")
    await platform.edit(HERE, answer, Part("final"))
    assert discord.fake.bot_texts(GENERAL) == ["final"]
    await platform.delete(HERE, answer)
    assert discord.fake.bot_texts(GENERAL) == []


async def test_a_429_is_rate_limited_for_its_retry_after(discord: Any) -> None:
    platform = await discord.start()
    discord.fake.fail_next("post", 429, retry_after=7.5)
    with pytest.raises(RateLimited) as limited:
        await platform.post(HERE, Part("x"), "k")
    assert limited.value.wait == pytest.approx(7.5, abs=0.5)
    assert discord.fake.bot_texts(GENERAL) == []


@pytest.mark.parametrize("status", [500, 502, 503])
async def test_a_server_error_is_transient(discord: Any, status: int) -> None:
    platform = await discord.start()
    discord.fake.fail_next("edit", status)
    answer = await platform.post(HERE, Part("x"), "k")
    with pytest.raises(Transient):
        await platform.edit(HERE, answer, Part("y"))


async def test_a_dropped_connection_is_transient(discord: Any) -> None:
    platform = await discord.start()
    discord.fake.drop_next("post")
    with pytest.raises(Transient):
        await platform.post(HERE, Part("x"), "k")


async def test_a_channel_without_permission_is_refused_for_permission(discord: Any) -> None:
    platform = await discord.start()
    discord.fake.forbidden.add(RANDOM)
    with pytest.raises(Refused) as refused:
        await platform.post(f"{GUILD}:{RANDOM}", Part("x"), "k")
    assert refused.value.reason == "refused_permission"


async def test_a_message_over_2000_characters_is_refused_as_too_large(discord: Any) -> None:
    platform = await discord.start()
    with pytest.raises(Refused) as refused:
        await platform.post(HERE, Part("x" * 2001), "k")
    assert refused.value.reason == "refused_too_large"


async def test_editing_a_message_that_is_gone_is_refused_as_unsupported(discord: Any) -> None:
    platform = await discord.start()
    answer = await platform.post(HERE, Part("x"), "k")
    await discord.fake.user_deletes(GENERAL, answer)
    with pytest.raises(Refused) as refused:
        await platform.edit(HERE, answer, Part("y"))
    assert refused.value.reason == "refused_unsupported"


async def test_the_fake_counts_a_call_made_inside_a_429_s_retry_after(discord: Any) -> None:
    # The burst test counts `early` calls to show the engine waits: the count must see one
    # (made here without the adapter, which would not call before the bucket refills).
    fake = discord.fake
    fake.fail_next("post", 429, retry_after=60.0)
    url = f"{fake.url}/api/v10/channels/{GENERAL}/messages"
    headers = {"Authorization": f"Bot {fake.token}"}
    async with aiohttp.ClientSession() as session:
        for _ in range(2):
            async with session.post(url, json={"content": "x"}, headers=headers) as answer:
                await answer.read()
    assert (fake.limited, fake.early) == (1, 1)
