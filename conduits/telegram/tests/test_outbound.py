"""ore output out: typing, drafts, edits, formatting, splitting, limits, faults, restarts."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from tests.conftest import Harness

pytestmark = pytest.mark.asyncio

DM = 1001
GROUP = -100200


async def test_the_chat_shows_typing_while_the_turn_runs(tg: Harness) -> None:
    script = tg.script("think", "thought", tg.HOLD, " done")
    await tg.start()
    await tg.fake.user_says(DM, "think")
    await asyncio.wait_for(script.holding.wait(), 10)
    await tg.until(lambda: (DM, 0, "typing") in tg.fake.actions)
    script.proceed.set()
    await tg.shows(DM, ["thought done"])


async def test_a_private_answer_streams_into_a_draft_and_ends_as_one_formatted_message(
    tg: Harness,
) -> None:
    script = tg.script("stream", "part one", tg.HOLD, " **done**")
    await tg.start()
    await tg.fake.user_says(DM, "stream")
    await asyncio.wait_for(script.holding.wait(), 10)
    await tg.until(lambda: tg.fake.draft(DM) == "part one")
    assert tg.fake.bot_messages(DM) == []
    script.proceed.set()
    await tg.shows(DM, ["part one done"])
    (message,) = tg.fake.bot_messages(DM)
    assert (message.source, message.parse_mode) == ("part one <b>done</b>", "HTML")
    assert tg.fake.draft(DM) == ""  # a real message ends the draft


async def test_a_group_answer_is_one_message_edited_from_plain_to_formatted(tg: Harness) -> None:
    script = tg.script("stream", "part *one*", tg.HOLD, " **done**")
    await tg.start()
    await tg.fake.user_says(GROUP, "@ore_test_bot stream")
    await asyncio.wait_for(script.holding.wait(), 10)
    await tg.shows(GROUP, ["part *one*"])  # intermediate text is plain
    script.proceed.set()
    await tg.shows(GROUP, ["part one done"])
    assert len(tg.fake.calls("sendMessage")) == 1
    assert tg.fake.bot_messages(GROUP)[0].parse_mode == "HTML"


async def test_a_long_answer_is_split_at_boundaries_with_balanced_code_fences(
    tg: Harness,
) -> None:
    code = "```python\n" + "\n".join(f"print({i})" for i in range(600)) + "\n```"
    prose = "\n\n".join(f"paragraph {i} " + "word " * 60 for i in range(12))
    tg.script("long", prose + "\n\n" + code + "\n\nthe end")
    await tg.start()
    await tg.fake.user_says(DM, "long")
    await tg.until(lambda: any("the end" in t for t in tg.fake.bot_texts(DM)))
    messages = tg.fake.bot_messages(DM)
    assert len(messages) >= 3
    assert all(len(m.text) <= 4096 for m in messages)
    assert all(m.parse_mode == "HTML" for m in messages)
    assert all(m.source.count("<pre>") == m.source.count("</pre>") for m in messages)
    shown = "\n".join(m.text for m in messages)
    assert all(f"print({i})" in shown for i in range(600))
    assert all(f"paragraph {i} " in shown for i in range(12))


async def test_refused_entities_fall_back_to_plain_text(tg: Harness) -> None:
    tg.script("format", "**bold** answer")
    tg.fake.fail_next("sendMessage", description="Bad Request: can't parse entities: oops")
    await tg.start()
    await tg.fake.user_says(DM, "format")
    await tg.shows(DM, ["**bold** answer"])
    assert tg.fake.bot_messages(DM)[0].parse_mode == ""


async def test_flood_control_is_waited_out_and_nothing_is_dropped(tg: Harness) -> None:
    tg.fake.fail_next(
        "sendMessage", status=429, description="Too Many Requests: retry after 1", retry_after=1
    )
    await tg.start()
    await tg.fake.user_says(DM, "busy")
    await tg.shows(DM, ["echo: busy"])
    assert len(tg.fake.calls("sendMessage")) == 2


@pytest.mark.parametrize("fault", ["502", "dropped"])
async def test_a_send_without_an_answer_is_tried_again(tg: Harness, fault: str) -> None:
    if fault == "502":
        tg.fake.fail_next("sendMessage", status=502)
    else:
        tg.fake.drop_next("sendMessage")
    await tg.start()
    await tg.fake.user_says(DM, "flaky")
    await tg.shows(DM, ["echo: flaky"])


async def test_an_answer_to_a_topic_that_is_gone_goes_to_the_chat(tg: Harness) -> None:
    script = tg.script("topic", "answer", tg.HOLD, " here")
    fake = tg.fake
    chat = fake.chat(GROUP, "supergroup", forum=True)
    topic = fake.open_topic(GROUP)
    await tg.start(groups="all", drafts=False)
    await fake.user_says(GROUP, "topic", topic=topic)
    await asyncio.wait_for(script.holding.wait(), 10)
    await tg.shows(GROUP, ["answer"], topic=topic)
    chat.topics.discard(topic)
    fake.bot_messages(GROUP)[0].deleted = True  # closed with its topic
    script.proceed.set()
    await tg.shows(GROUP, ["answer here"], topic=0)
    assert ("sendMessage", "Bad Request: message thread not found") in fake.refused


async def test_an_interrupted_answer_ends_with_a_marker(tg: Harness) -> None:
    script = tg.script("slow", "started", tg.HOLD, " never")
    await tg.start()
    await tg.fake.user_says(DM, "slow")
    await asyncio.wait_for(script.holding.wait(), 10)
    await tg.fake.user_says(DM, "/stop")
    await tg.shows(DM, ["started\n\n(interrupted)"])


async def test_a_restart_mid_answer_finishes_the_same_message(tg: Harness) -> None:
    script = tg.script("long task", "half", tg.HOLD, " and whole")
    await tg.start()
    await tg.fake.user_says(GROUP, "@ore_test_bot long task")
    await asyncio.wait_for(script.holding.wait(), 10)
    await tg.shows(GROUP, ["half"])
    await tg.stop()
    script.proceed.set()
    await tg.start()
    await tg.shows(GROUP, ["half and whole"])
    assert len(tg.fake.calls("sendMessage")) == 1


@pytest.mark.slow
async def test_a_burst_of_100_messages_into_one_group_is_answered_in_order_under_limits(
    tg: Harness,
) -> None:
    """Telegram's windows scaled to a second (25 sends a second in the group, the
    conduit told 30): flood control answers 429 with retry_after, and one more 429 is
    scripted; every answer still arrives once, in order, formatted."""
    tg.fake.rate_limit(per_group=(25, 1.0), retry_after=1)
    tg.fake.fail_next("sendMessage", status=429, description="Too Many Requests", retry_after=1)
    await tg.start(groups="all", chat_per_second=40, group_per_minute=1800)
    for i in range(100):
        await tg.fake.user_says(GROUP, f"m{i}")
    wanted = [f"echo: m{i}" for i in range(100)]
    await tg.until(lambda: tg.fake.bot_texts(GROUP) == wanted, within=120)
    assert all(m.parse_mode == "HTML" for m in tg.fake.bot_messages(GROUP))
    print(
        f"\nburst of 100: {len(tg.fake.calls('sendMessage'))} sends, "
        f"{len(tg.fake.calls('editMessageText'))} edits, {len(tg.fake.throttled)} throttled"
    )


async def test_a_throttled_chat_action_never_holds_up_the_answer(tg: Harness) -> None:
    tg.fake.fail_next("sendChatAction", status=429, description="Too Many Requests", retry_after=60)
    await tg.start()
    await tg.fake.user_says(DM, "quick")
    await tg.shows(DM, ["echo: quick"])  # well before the 60 s pause would end


async def test_an_answer_to_a_group_that_became_a_supergroup_goes_to_the_supergroup(
    tg: Harness,
) -> None:
    script = tg.script("upgrade", "soon", tg.HOLD, " there")
    await tg.start(groups="all")
    tg.fake.chat(-5, "group")
    await tg.fake.user_says(-5, "upgrade")
    await asyncio.wait_for(script.holding.wait(), 10)
    await tg.until(lambda: len(tg.fake.bot_messages(-5)) == 1)
    tg.fake.bot_messages(-5)[0].deleted = True  # the old group is read-only history
    tg.fake.migrate(-5, -1005)
    script.proceed.set()
    await tg.shows(-1005, ["soon there"])


async def test_flood_control_is_counted_in_the_conduit_metrics(tg: Harness) -> None:
    from ore_core.conduit.counters import REGISTRY

    def waits() -> float:
        labels = {"conduit": "telegram"}
        return REGISTRY.get_sample_value("ore_conduit_rate_limit_waits_total", labels) or 0.0

    before = waits()
    tg.fake.fail_next("sendMessage", status=429, description="Too Many Requests", retry_after=1)
    await tg.start()
    await tg.fake.user_says(DM, "busy")
    await tg.shows(DM, ["echo: busy"])
    assert waits() - before == 1
