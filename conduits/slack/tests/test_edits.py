"""Edits are core edits (a branch answered again on an unlinked thread, or ignored with
`on_edit = "ignore"`); deletes interrupt a running answer and delete the message."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import pytest

from ore_core import Role, Text

if TYPE_CHECKING:
    from tests.conftest import Harness

pytestmark = pytest.mark.asyncio

CHANNEL = "CGENERAL"


def user_turn_texts(turns: list) -> list[str]:  # type: ignore[type-arg]
    return [
        a.content for t in turns if t.role == Role.USER for a in t.artifacts if isinstance(a, Text)
    ]


async def test_an_edit_of_the_latest_message_branches_the_thread_and_answers_again(
    slack: Harness,
) -> None:
    await slack.start()
    fake = slack.fake
    root = await fake.user_says(CHANNEL, "wrong question")
    assert await slack.answers(CHANNEL, root) == ["echo: wrong question"]
    await fake.deliver(fake.callback(fake.edit_event(root, f"<@{fake.bot_user}> right question")))
    answers = await slack.answers(CHANNEL, root, 2)
    assert answers[1] == "echo: right question"
    (thread,) = await slack.threads()
    assert user_turn_texts(thread.turns()) == ["right question"]
    assert sorted(user_turn_texts(thread.all_turns())) == ["right question", "wrong question"]


async def test_an_edit_while_the_answer_runs_interrupts_it_and_answers_the_new_text(
    slack: Harness,
) -> None:
    script = slack.script("slow question", "thinking", slack.HOLD, " never")
    await slack.start()
    fake = slack.fake
    root = await fake.user_says(CHANNEL, "slow question")
    await asyncio.wait_for(script.holding.wait(), 10)
    await fake.deliver(fake.callback(fake.edit_event(root, f"<@{fake.bot_user}> quick one")))
    answers = await slack.answers(CHANNEL, root, 2)
    assert answers == ["thinking\n\n_(interrupted)_", "echo: quick one"]


async def test_an_edit_of_a_follow_up_branches_after_the_answer_before_it(
    slack: Harness,
) -> None:
    await slack.start()
    fake = slack.fake
    root = await fake.user_says(CHANNEL, "one")
    follow = await fake.user_says(CHANNEL, "two", thread_ts=root.ts)
    await slack.answers(CHANNEL, root, 2)
    await fake.deliver(fake.callback(fake.edit_event(follow, f"<@{fake.bot_user}> three")))
    assert (await slack.answers(CHANNEL, root, 3))[2] == "echo: three"
    (thread,) = await slack.threads()
    assert user_turn_texts(thread.turns()) == ["one", "three"]


async def test_an_edit_of_an_older_message_on_an_unlinked_thread_branches_there(
    slack: Harness,
) -> None:
    await slack.start()
    fake = slack.fake
    root = await fake.user_says(CHANNEL, "old")
    await fake.user_says(CHANNEL, "new", thread_ts=root.ts)
    await slack.answers(CHANNEL, root, 2)
    await fake.deliver(fake.callback(fake.edit_event(root, f"<@{fake.bot_user}> old, edited")))
    assert (await slack.answers(CHANNEL, root, 3))[2] == "echo: old, edited"
    (thread,) = await slack.threads()
    assert user_turn_texts(thread.turns()) == ["old, edited"]


async def test_edits_are_ignored_when_on_edit_is_ignore(slack: Harness) -> None:
    await slack.start(on_edit="ignore")
    fake = slack.fake
    root = await fake.user_says(CHANNEL, "keep")
    await slack.answers(CHANNEL, root)
    await fake.deliver(fake.callback(fake.edit_event(root, f"<@{fake.bot_user}> changed")))
    await fake.user_says(CHANNEL, "sentinel", thread_ts=root.ts)
    assert await slack.answers(CHANNEL, root, 2) == ["echo: keep", "echo: sentinel"]
    assert await slack.user_texts() == [["keep", "sentinel"]]


async def test_deleting_a_message_interrupts_its_running_answer(slack: Harness) -> None:
    script = slack.script("long job", "working", slack.HOLD, " never shown")
    await slack.start()
    root = await slack.fake.user_says(CHANNEL, "long job")
    await asyncio.wait_for(script.holding.wait(), 10)
    await slack.fake.deliver(slack.fake.callback(slack.fake.delete_event(root)))

    def interrupted() -> bool:
        messages = slack.fake.bot_messages(CHANNEL)
        return bool(messages) and messages[0].text == "working\n\n_(interrupted)_"

    await slack.wait_for(interrupted)
    await slack.wait_for(lambda: slack.fake.status_of(CHANNEL, root.ts) == "")
    await slack.fake.user_says(CHANNEL, "sentinel", thread_ts=root.ts)
    await slack.answers(CHANNEL, root, 2)  # the delete, sent before it, was handled
    (thread,) = await slack.threads()
    assert user_turn_texts(thread.turns()) == ["sentinel"]  # a tombstone: the model no
    assert "long job" in user_turn_texts(thread.all_turns())  # longer sees it; ore keeps it


async def test_deleting_an_answered_message_interrupts_nothing(slack: Harness) -> None:
    script = slack.script("second", "still going", slack.HOLD, " and done")
    await slack.start()
    root = await slack.fake.user_says(CHANNEL, "first")
    await slack.answers(CHANNEL, root)
    await slack.fake.user_says(CHANNEL, "second", thread_ts=root.ts)
    await asyncio.wait_for(script.holding.wait(), 10)
    await slack.fake.deliver(slack.fake.callback(slack.fake.delete_event(root)))
    sentinel = await slack.fake.user_says(CHANNEL, "sentinel")
    await slack.answers(CHANNEL, sentinel)  # the delete, sent before it, was handled
    script.proceed.set()
    assert await slack.answers(CHANNEL, root.ts, 2) == ["echo: first", "still going and done"]
