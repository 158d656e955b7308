"""The `ore_regenerate` message shortcut: a sibling answer in the same Slack thread."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from ore_conduit_slack.shortcut import REGENERATE
from ore_core import Role

if TYPE_CHECKING:
    from tests.conftest import Harness

pytestmark = pytest.mark.asyncio

CHANNEL = "CGENERAL"


async def test_the_shortcut_on_an_answer_adds_a_sibling_answer_in_the_same_thread(
    slack: Harness,
) -> None:
    await slack.start()
    fake = slack.fake
    root = await fake.user_says(CHANNEL, "one")
    assert await slack.answers(CHANNEL, root) == ["echo: one"]
    (answer,) = fake.bot_messages(CHANNEL, root.ts)
    envelope = await fake.message_shortcut(answer, REGENERATE)
    await fake.wait_ack(envelope)
    assert await slack.answers(CHANNEL, root, 2) == ["echo: one", "echo: one"]
    (thread,) = await slack.threads()
    users = [t for t in thread.all_turns() if t.role == Role.USER]
    answers = [t for t in thread.all_turns() if t.role == Role.ASSISTANT]
    assert len(users) == 1  # no second user turn
    assert [a.parent_id for a in answers] == [users[0].id, users[0].id]


async def test_the_shortcut_on_an_older_answer_answers_that_answers_question(
    slack: Harness,
) -> None:
    await slack.start()
    fake = slack.fake
    root = await fake.user_says(CHANNEL, "one")
    assert await slack.answers(CHANNEL, root) == ["echo: one"]
    await fake.user_says(CHANNEL, "two", thread_ts=root.ts)
    assert await slack.answers(CHANNEL, root, 2) == ["echo: one", "echo: two"]
    first = fake.bot_messages(CHANNEL, root.ts)[0]
    await fake.message_shortcut(first, REGENERATE)
    assert await slack.answers(CHANNEL, root, 3) == ["echo: one", "echo: two", "echo: one"]
    (thread,) = await slack.threads()
    assert len([t for t in thread.all_turns() if t.role == Role.USER]) == 2


async def test_the_shortcut_on_a_question_answers_it_again(slack: Harness) -> None:
    await slack.start()
    fake = slack.fake
    root = await fake.user_says(CHANNEL, "one")
    assert await slack.answers(CHANNEL, root) == ["echo: one"]
    await fake.message_shortcut(root, REGENERATE)
    assert await slack.answers(CHANNEL, root, 2) == ["echo: one", "echo: one"]
    (thread,) = await slack.threads()
    assert len([t for t in thread.all_turns() if t.role == Role.USER]) == 1


async def test_the_shortcut_on_a_regenerated_answer_answers_its_question_again(
    slack: Harness,
) -> None:
    await slack.start()
    fake = slack.fake
    root = await fake.user_says(CHANNEL, "one")
    assert await slack.answers(CHANNEL, root) == ["echo: one"]
    await fake.message_shortcut(fake.bot_messages(CHANNEL, root.ts)[0], REGENERATE)
    await slack.answers(CHANNEL, root, 2)
    await fake.message_shortcut(fake.bot_messages(CHANNEL, root.ts)[1], REGENERATE)
    assert await slack.answers(CHANNEL, root, 3) == ["echo: one"] * 3
    (thread,) = await slack.threads()
    assert len([t for t in thread.all_turns() if t.role == Role.USER]) == 1
