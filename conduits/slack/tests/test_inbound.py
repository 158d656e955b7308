"""Slack events in: retries, duplicates, who is answered, acks, reconnects, signatures."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from ore_conduit_slack import event_id

if TYPE_CHECKING:
    from tests.conftest import Harness

pytestmark = pytest.mark.asyncio

CHANNEL = "CGENERAL"


async def test_a_socket_mode_retry_makes_one_user_message_and_one_answer(slack: Harness) -> None:
    await slack.start()
    root = await slack.fake.user_says(CHANNEL, "hello", events=("app_mention",))
    event = slack.fake.message_event(root, event_type="app_mention")
    for attempt in (1, 2, 3):
        await slack.fake.deliver(slack.fake.callback(event), retry_attempt=attempt)
    follow = await slack.fake.user_says(CHANNEL, "after", thread_ts=root.ts)
    answers = await slack.answers(CHANNEL, root, 2)
    assert answers == ["echo: hello", "echo: after"]
    assert await slack.user_texts() == [["hello", "after"]]
    assert follow.thread_ts == root.ts


async def test_an_event_sent_while_the_socket_was_down_is_answered_when_it_is_back(
    slack: Harness,
) -> None:
    await slack.start()
    await slack.fake.drop_sockets()
    await slack.wait_for(lambda: not slack.fake.connected)
    root = await slack.fake.user_says(CHANNEL, "are you there?", events=("app_mention",))
    assert await slack.answers(CHANNEL, root) == ["echo: are you there?"]
    assert slack.fake.connections >= 2  # delivered as a retry on the new socket


async def test_app_mention_and_message_events_of_one_message_make_one_turn(
    slack: Harness,
) -> None:
    await slack.start()
    root = await slack.fake.user_says(CHANNEL, "both", events=("app_mention", "message"))
    await slack.fake.user_says(CHANNEL, "next", thread_ts=root.ts)
    assert await slack.answers(CHANNEL, root, 2) == ["echo: both", "echo: next"]
    assert await slack.user_texts() == [["both", "next"]]


async def test_an_event_is_acked_at_once_while_the_core_is_down_and_answered_when_it_is_back(
    slack: Harness,
) -> None:
    await slack.start()
    await slack.core.service.stop(grace=0)
    message = slack.fake.add_message(CHANNEL, f"<@{slack.fake.bot_user}> patience", user="UBOB")
    envelope = await slack.fake.deliver(
        slack.fake.callback(slack.fake.message_event(message, event_type="app_mention"))
    )
    await slack.fake.wait_ack(envelope, within=3.0)  # Slack's limit; nothing answered yet
    assert slack.fake.answers(CHANNEL, message.ts) == []
    await slack.restart_core()
    assert await slack.answers(CHANNEL, message) == ["echo: patience"]


async def test_the_bots_own_messages_other_bots_and_its_own_edits_are_ignored(
    slack: Harness,
) -> None:
    await slack.start()
    fake = slack.fake
    root = await fake.user_says(CHANNEL, "start")
    assert await slack.answers(CHANNEL, root) == ["echo: start"]
    mine = fake.bot_messages(CHANNEL, root.ts)[0]
    own = fake.add_message(
        CHANNEL, f"<@{fake.bot_user}> me", user=fake.bot_user, bot_id=fake.bot_id, thread_ts=root.ts
    )
    other = fake.add_message(
        CHANNEL, f"<@{fake.bot_user}> loop?", bot_id="BOTHER", thread_ts=root.ts
    )
    for message in (own, other):
        await fake.deliver(fake.callback(fake.message_event(message)))
        await fake.deliver(fake.callback(fake.message_event(message, event_type="app_mention")))
    await fake.deliver(fake.callback(fake.edit_event(mine, f"<@{fake.bot_user}> edited")))
    await fake.user_says(CHANNEL, "last", thread_ts=root.ts)
    answers = await slack.answers(CHANNEL, root, 2)
    assert len(answers) == 2
    assert answers[1] == "echo: last"
    assert await slack.user_texts() == [["start", "last"]]


async def test_an_allow_listed_bot_is_answered(slack: Harness) -> None:
    await slack.start(allow_bots=["BFRIEND"])
    fake = slack.fake
    message = fake.add_message(CHANNEL, f"<@{fake.bot_user}> ping", bot_id="BFRIEND")
    await fake.deliver(fake.callback(fake.message_event(message, event_type="app_mention")))
    assert await slack.answers(CHANNEL, message) == ["echo: ping"]


async def test_replies_in_a_thread_the_bot_is_in_are_answered_without_a_mention(
    slack: Harness,
) -> None:
    await slack.start()
    root = await slack.fake.user_says(CHANNEL, "first")
    await slack.answers(CHANNEL, root)
    await slack.fake.user_says(CHANNEL, "no mention", thread_ts=root.ts, mention=False)
    assert await slack.answers(CHANNEL, root, 2) == ["echo: first", "echo: no mention"]
    elsewhere = await slack.fake.user_says(CHANNEL, "chatter", mention=False)
    sentinel = await slack.fake.user_says(CHANNEL, "sentinel")
    await slack.answers(CHANNEL, sentinel)
    assert slack.fake.answers(CHANNEL, elsewhere.ts) == []


async def test_a_direct_message_is_answered_in_its_thread(slack: Harness) -> None:
    await slack.start()
    message = await slack.fake.user_says("DALICE", "hi there", mention=False, events=("message",))
    assert await slack.answers("DALICE", message) == ["echo: hi there"]
    assert slack.fake.channel_level_bot_messages("DALICE") == []


async def test_the_mention_is_stripped_and_the_thread_is_keyed_by_team_channel_and_root(
    slack: Harness,
) -> None:
    await slack.start()
    root = await slack.fake.user_says(CHANNEL, "strip me")
    await slack.answers(CHANNEL, root)
    (thread,) = await slack.threads()
    key = f"-:{slack.fake.team}:{CHANNEL}:{root.ts}"
    assert thread.meta().get("slack.thread") == key
    (user_turn,) = [t for t in thread.turns() if t.role == "user"]
    assert user_turn.event_id == event_id("", slack.fake.team, CHANNEL, root.ts)


async def test_a_socket_refresh_reconnects_without_processing_twice(slack: Harness) -> None:
    await slack.start()
    root = await slack.fake.user_says(CHANNEL, "before", events=("app_mention",))
    await slack.answers(CHANNEL, root)
    await slack.fake.disconnect("refresh_requested")
    await slack.fake.wait_connected(2)
    event = slack.fake.message_event(root, event_type="app_mention")
    await slack.fake.deliver(slack.fake.callback(event), retry_attempt=1)
    await slack.fake.user_says(CHANNEL, "after", thread_ts=root.ts)
    assert await slack.answers(CHANNEL, root, 2) == ["echo: before", "echo: after"]
    assert await slack.user_texts() == [["before", "after"]]


# -- HTTP mode (the Events API) -------------------------------------------------------


async def test_http_mode_answers_signed_events_and_refuses_stale_tampered_and_unsigned(
    slack: Harness,
) -> None:
    await slack.start(mode="http", http_host="127.0.0.1", http_port=0)
    fake = slack.fake
    message = fake.add_message(CHANNEL, f"<@{fake.bot_user}> over http", user="UALICE")
    payload = fake.callback(fake.message_event(message, event_type="app_mention"))
    assert await fake.post_event(slack.http_url, payload, age=400) == 401
    assert await fake.post_event(slack.http_url, payload, tamper=True) == 401
    assert await fake.post_event(slack.http_url, payload, signed=False) == 401
    assert await fake.post_event(slack.http_url, payload, signing_secret="wrong") == 401
    assert await fake.post_event(slack.http_url, payload) == 200
    assert await slack.answers(CHANNEL, message) == ["echo: over http"]
    assert await slack.user_texts() == [["over http"]]  # the tampered body never got in


async def test_an_http_retry_makes_one_user_message_and_one_answer(slack: Harness) -> None:
    await slack.start(mode="http", http_host="127.0.0.1", http_port=0)
    fake = slack.fake
    message = fake.add_message(CHANNEL, f"<@{fake.bot_user}> once", user="UALICE")
    payload = fake.callback(fake.message_event(message, event_type="app_mention"))
    assert await fake.post_event(slack.http_url, payload) == 200
    for retry in (1, 2):
        assert await fake.post_event(slack.http_url, payload, retry_num=retry) == 200
    follow = fake.add_message(
        CHANNEL, f"<@{fake.bot_user}> twice", user="UALICE", thread_ts=message.ts
    )
    follow_payload = fake.callback(fake.message_event(follow, event_type="app_mention"))
    assert await fake.post_event(slack.http_url, follow_payload) == 200
    assert await slack.answers(CHANNEL, message, 2) == ["echo: once", "echo: twice"]
    assert await slack.user_texts() == [["once", "twice"]]


async def test_http_mode_answers_slacks_url_verification(slack: Harness) -> None:
    await slack.start(mode="http", http_host="127.0.0.1", http_port=0)
    challenge = {"type": "url_verification", "challenge": "abc123", "token": "x"}
    assert await slack.fake.post_event(slack.http_url, challenge) == 200


async def test_a_thread_keeps_its_ore_thread_across_a_conduit_restart(slack: Harness) -> None:
    conduit = await slack.start()
    root = await slack.fake.user_says(CHANNEL, "remember me")
    await slack.answers(CHANNEL, root)
    await conduit.stop()
    await slack.start()
    await slack.fake.user_says(CHANNEL, "still me?", thread_ts=root.ts, mention=False)
    assert await slack.answers(CHANNEL, root, 2) == ["echo: remember me", "echo: still me?"]
    assert await slack.user_texts() == [["remember me", "still me?"]]


async def test_a_thread_of_others_is_asked_about_once_and_joined_by_a_mention(
    slack: Harness,
) -> None:
    await slack.start()
    fake = slack.fake
    root = fake.add_message(CHANNEL, "people talking", user="UBOB")
    for text in ("reply one", "reply two"):
        await fake.user_says(CHANNEL, text, thread_ts=root.ts, mention=False)
    await slack.wait_for(lambda: bool(fake.calls("conversations.replies")))
    await fake.user_says(CHANNEL, "now you", thread_ts=root.ts)
    await fake.user_says(CHANNEL, "and this", thread_ts=root.ts, mention=False)
    assert await slack.answers(CHANNEL, root, 2) == ["echo: now you", "echo: and this"]
    assert len(fake.calls("conversations.replies")) == 1


async def test_a_reply_waits_while_slack_cannot_say_whose_thread_it_is(slack: Harness) -> None:
    """Before, a failed `conversations.replies` counted as "not the bot's thread" and the
    acknowledged reply was never answered."""
    conduit = await slack.start()
    fake = slack.fake
    root = await fake.user_says(CHANNEL, "remember me")
    await slack.answers(CHANNEL, root)
    await conduit.stop()
    await slack.start()  # a new run: it has to ask whether the thread is the bot's
    fake.fail_next("conversations.replies", status=503, times=12)  # past the API's retries
    await fake.user_says(CHANNEL, "still there?", thread_ts=root.ts, mention=False)
    assert await slack.answers(CHANNEL, root, 2) == ["echo: remember me", "echo: still there?"]
    assert len(fake.calls("conversations.replies")) > 12


async def test_assistant_thread_events_are_acknowledged_and_answer_nothing(
    slack: Harness,
) -> None:
    await slack.start()
    started = {
        "type": "assistant_thread_started",
        "assistant_thread": {"user_id": "UALICE", "channel_id": "DALICE", "thread_ts": "1.2"},
    }
    envelope = await slack.fake.deliver(slack.fake.callback(started))
    await slack.fake.wait_ack(envelope)
    sentinel = await slack.fake.user_says(CHANNEL, "sentinel")
    await slack.answers(CHANNEL, sentinel)
    assert slack.fake.bot_messages("DALICE") == []
