"""Edits branch the ore thread and answer again (or are ignored)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import pytest

from ore_conduit_telegram.inbound import NOT_AN_ANSWER
from ore_core import Role, Text

if TYPE_CHECKING:
    from tests.conftest import Harness

pytestmark = pytest.mark.asyncio

DM = 1001


def user_texts(turns: list[Any]) -> list[str]:
    return [
        a.content for t in turns if t.role == Role.USER for a in t.artifacts if isinstance(a, Text)
    ]


async def test_an_edit_of_the_latest_message_branches_the_thread_and_answers_again(
    tg: Harness,
) -> None:
    await tg.start()
    asked = await tg.fake.user_says(DM, "wrong question")
    await tg.shows(DM, ["echo: wrong question"])
    await tg.fake.user_edits(asked, "right question")
    await tg.shows(DM, ["echo: wrong question", "echo: right question"])
    (thread,) = await tg.threads()
    assert user_texts(thread.turns()) == ["right question"]
    assert sorted(user_texts(thread.all_turns())) == ["right question", "wrong question"]


async def test_an_edit_while_the_answer_runs_interrupts_it_and_answers_the_new_text(
    tg: Harness,
) -> None:
    script = tg.script("slow question", "thinking", tg.HOLD, " never")
    await tg.start()
    asked = await tg.fake.user_says(DM, "slow question")
    await asyncio.wait_for(script.holding.wait(), 10)
    await tg.fake.user_edits(asked, "quick one")
    await tg.shows(DM, ["thinking\n\n(interrupted)", "echo: quick one"])


async def test_an_edit_of_an_older_message_in_an_unlinked_chat_branches_there(
    tg: Harness,
) -> None:
    await tg.start()
    first = await tg.fake.user_says(DM, "one")
    await tg.shows(DM, ["echo: one"])
    await tg.fake.user_says(DM, "two")
    await tg.shows(DM, ["echo: one", "echo: two"])
    await tg.fake.user_edits(first, "one, edited")
    await tg.shows(DM, ["echo: one", "echo: two", "echo: one, edited"])


async def test_retry_answers_the_latest_question_again_as_a_sibling(tg: Harness) -> None:
    await tg.start()
    await tg.fake.user_says(DM, "one")
    await tg.shows(DM, ["echo: one"])
    await tg.fake.user_says(DM, "/retry")
    await tg.shows(DM, ["echo: one", "echo: one"])
    (thread,) = await tg.threads()
    answers = [t for t in thread.all_turns() if t.role == Role.ASSISTANT]
    assert len(answers) == 2
    assert answers[0].parent_id == answers[1].parent_id
    assert len(thread.all_turns()) == 3  # no second user turn


async def test_retry_as_a_reply_to_an_older_answer_answers_that_answers_question_again(
    tg: Harness,
) -> None:
    await tg.start()
    await tg.fake.user_says(DM, "one")
    await tg.shows(DM, ["echo: one"])
    await tg.fake.user_says(DM, "two")
    await tg.shows(DM, ["echo: one", "echo: two"])
    first_answer = tg.fake.bot_messages(DM)[0]
    await tg.fake.user_says(DM, "/retry", reply_to=first_answer)
    await tg.shows(DM, ["echo: one", "echo: two", "echo: one"])
    (thread,) = await tg.threads()
    one = next(t for t in thread.all_turns() if user_texts([t]) == ["one"])
    answers_to_one = [t for t in thread.all_turns() if t.parent_id == one.id]
    assert len(answers_to_one) == 2
    assert sorted(user_texts(thread.all_turns())) == ["one", "two"]  # no second user turn


async def test_retry_as_a_reply_to_a_message_of_the_bots_that_is_no_answer_says_so(
    tg: Harness,
) -> None:
    await tg.start()
    await tg.fake.user_says(DM, "one")
    await tg.shows(DM, ["echo: one"])
    greeting = await tg.fake.user_says(DM, "/start")
    await tg.until(lambda: len(tg.fake.bot_messages(DM)) == 2)
    await tg.fake.user_says(DM, "/retry", reply_to=tg.fake.replies_to(greeting)[0])
    await tg.until(lambda: len(tg.fake.bot_messages(DM)) == 3)
    assert tg.fake.bot_texts(DM)[-1] == NOT_AN_ANSWER
    (thread,) = await tg.threads()
    assert len(thread.all_turns()) == 2  # nothing answered again


async def test_edits_are_ignored_when_configured(tg: Harness) -> None:
    await tg.start(on_edit="ignore")
    asked = await tg.fake.user_says(DM, "as written")
    await tg.shows(DM, ["echo: as written"])
    await tg.fake.user_edits(asked, "changed")
    await tg.fake.user_says(DM, "next")
    await tg.shows(DM, ["echo: as written", "echo: next"])
