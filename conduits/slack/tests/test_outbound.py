"""ore output out: streaming, limits, rate limits, lost responses, markers, restarts."""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any

import pytest

from ore_conduit_slack import split_parts
from ore_conduit_slack.ids import REPLY_KEY, event_id, traceparent_of
from ore_conduit_slack.testing.fake import FakeMessage
from ore_conduit_slack.text import fence_at
from ore_core import ConduitClient, EventContext, Role, Text, UserMessageEvent

if TYPE_CHECKING:
    from tests.conftest import Harness

pytestmark = pytest.mark.asyncio

CHANNEL = "CGENERAL"
STREAM_CALLS = ("chat.startStream", "chat.appendStream", "chat.stopStream")


def paragraphs(count: int, words: int = 40, tag: str = "p") -> str:
    return "\n\n".join(f"{tag}{i} " + " ".join(["word"] * words) for i in range(count))


async def stored_answer(slack: Harness) -> str:
    """The text of the one stored thread's last assistant turn."""
    (thread,) = await slack.threads()
    turn = [t for t in thread.turns() if t.role == Role.ASSISTANT][-1]
    return "".join(a.content for a in turn.artifacts if isinstance(a, Text))


async def test_deltas_are_coalesced_and_the_final_text_equals_the_ore_turn(
    slack: Harness,
) -> None:
    reply = paragraphs(12)  # ~3,000 characters in 4-character deltas
    slack.script("tell me", reply)
    await slack.start()
    root = await slack.fake.user_says(CHANNEL, "tell me")
    assert await slack.answers(CHANNEL, root) == [reply]
    assert await stored_answer(slack) == reply
    calls = [c for c in slack.fake.calls() if c.method in STREAM_CALLS]
    assert len(slack.fake.calls("chat.startStream")) == 1
    assert len(calls) <= len(reply) // 200 + 6, [c.method for c in calls]
    assert slack.fake.rendered_thread(CHANNEL, root.ts) == [reply]


async def test_the_stream_goes_to_the_user_who_asked(slack: Harness) -> None:
    await slack.start()
    root = await slack.fake.user_says(CHANNEL, "who", user="UCAROL")
    await slack.answers(CHANNEL, root)
    (start,) = slack.fake.calls("chat.startStream")
    assert start.args["recipient_user_id"] == "UCAROL"
    assert start.args["recipient_team_id"] == slack.fake.team
    assert start.args["thread_ts"] == root.ts


async def test_two_threads_streaming_at_once_never_cross(slack: Harness) -> None:
    one = slack.script("one?", "ONE " * 300, slack.HOLD, "ONE-END")
    two = slack.script("two?", "TWO " * 300, slack.HOLD, "TWO-END")
    await slack.start()
    root_one = await slack.fake.user_says(CHANNEL, "one?")
    root_two = await slack.fake.user_says("CRANDOM", "two?")
    await asyncio.wait_for(one.holding.wait(), 10)
    await asyncio.wait_for(two.holding.wait(), 10)
    two.proceed.set()
    one.proceed.set()
    assert await slack.answers(CHANNEL, root_one) == [one.text]
    assert await slack.answers("CRANDOM", root_two) == [two.text]
    assert slack.fake.channel_level_bot_messages(CHANNEL) == []
    assert slack.fake.channel_level_bot_messages("CRANDOM") == []


async def test_a_status_shows_while_the_turn_runs_and_is_cleared_after(slack: Harness) -> None:
    script = slack.script("slow", "thinking done", slack.HOLD, " and more")
    await slack.start(status="is pondering…")
    root = await slack.fake.user_says(CHANNEL, "slow")
    await asyncio.wait_for(script.holding.wait(), 10)
    await slack.wait_for(lambda: slack.fake.status_of(CHANNEL, root.ts) == "is pondering…")
    script.proceed.set()
    await slack.answers(CHANNEL, root)
    await slack.wait_for(lambda: slack.fake.status_of(CHANNEL, root.ts) == "")


async def test_a_stream_that_slack_ends_mid_answer_is_finished_with_chat_update(
    slack: Harness,
) -> None:
    script = slack.script("long", "first half. ", slack.HOLD, "second half.")
    await slack.start(stream_max_age=10_000)  # never rolls over on its own
    root = await slack.fake.user_says(CHANNEL, "long")
    await asyncio.wait_for(script.holding.wait(), 10)
    await slack.wait_for(lambda: bool(slack.fake.calls("chat.startStream")))
    slack.fake.clock.advance(slack.fake.stream_lifetime + 1)
    script.proceed.set()
    assert await slack.answers(CHANNEL, root) == [script.text]
    assert ("chat.appendStream", "message_not_in_streaming_state") in slack.fake.refused or (
        "chat.stopStream",
        "message_not_in_streaming_state",
    ) in slack.fake.refused
    assert slack.fake.calls("chat.update")
    assert len(slack.fake.bot_messages(CHANNEL, root.ts)) == 1


async def test_an_old_stream_is_rolled_over_into_a_new_message_before_slack_ends_it(
    slack: Harness,
) -> None:
    script = slack.script("longer", "part one. ", slack.HOLD, "part two.", slack.HOLD, " end")
    await slack.start(stream_max_age=240)
    root = await slack.fake.user_says(CHANNEL, "longer")
    await asyncio.wait_for(script.holding.wait(), 10)
    await slack.wait_for(lambda: bool(slack.fake.calls("chat.startStream")))
    slack.fake.clock.advance(250)  # older than stream_max_age, younger than Slack's limit
    script.proceed.set()
    await slack.wait_for(lambda: len(slack.fake.calls("chat.startStream")) == 2)
    script.proceed.set()
    await slack.answers(CHANNEL, root)
    assert "".join(slack.fake.rendered_thread(CHANNEL, root.ts)) == script.text
    assert len(slack.fake.calls("chat.startStream")) == 2
    assert ("chat.appendStream", "message_not_in_streaming_state") not in slack.fake.refused


async def test_a_long_answer_is_split_into_messages_with_balanced_fences(slack: Harness) -> None:
    code = "```python\n" + "\n".join(f"value_{i} = {i}" for i in range(1500)) + "\n```\n\n"
    reply = paragraphs(40) + "\n\n" + code + paragraphs(30, tag="q")
    assert len(reply) > 30_000
    slack.script("essay", reply, chunk=500)
    await slack.start(message_chars=11_000)
    root = await slack.fake.user_says(CHANNEL, "essay")
    await slack.answers(CHANNEL, root)
    shown = slack.fake.rendered_thread(CHANNEL, root.ts)
    expected = split_parts(reply, 11_000)
    assert shown == [part.text for part in expected]
    assert "".join(part.body for part in expected) == reply
    assert len(shown) >= 3
    assert all(len(text) <= 11_000 and fence_at(text) is None for text in shown)
    assert await stored_answer(slack) == reply


async def test_a_long_answer_is_split_in_edit_mode_too(slack: Harness) -> None:
    reply = paragraphs(60)
    slack.script("essay", reply, chunk=300)
    await slack.start(streaming="edit", message_chars=4_000)
    root = await slack.fake.user_says(CHANNEL, "essay")
    await slack.answers(CHANNEL, root)
    shown = slack.fake.rendered_thread(CHANNEL, root.ts)
    assert shown == [part.text for part in split_parts(reply, 4_000)]
    assert not slack.fake.calls("chat.startStream")


async def test_without_native_streams_the_answer_is_posted_and_edited(slack: Harness) -> None:
    slack.fake.streams_enabled = False
    reply = paragraphs(8)
    slack.script("no streams", reply)
    await slack.start()
    root = await slack.fake.user_says(CHANNEL, "no streams")
    assert await slack.answers(CHANNEL, root) == [reply]
    root_two = await slack.fake.user_says(CHANNEL, "no streams")
    assert await slack.answers(CHANNEL, root_two) == [reply]
    assert len(slack.fake.calls("chat.startStream")) == 1  # refused once, then not tried
    assert len(slack.fake.calls("chat.postMessage")) == 2


async def test_a_rate_limited_chat_update_backs_off_and_the_final_edit_lands(
    slack: Harness,
) -> None:
    reply = paragraphs(10)
    slack.script("edits", reply, chunk=8, pause=0.003)
    slack.fake.rate_limit("chat.update", limit=2, seconds=1.0, retry_after=1)
    await slack.start(
        streaming="edit",
        edit_interval=0,
        flush_chars=20,
        flush_interval=0.05,
        updates_per_minute=6_000,
    )
    root = await slack.fake.user_says(CHANNEL, "edits")
    assert await slack.answers(CHANNEL, root) == [reply]
    assert 1 <= slack.fake.throttled.count("chat.update") <= 3  # honoured, not hammered


async def test_the_workspace_edit_budget_bounds_chat_update_calls(slack: Harness) -> None:
    reply = paragraphs(10)
    slack.script("budget", reply, chunk=8, pause=0.003)
    await slack.start(
        streaming="edit",
        edit_interval=0,
        flush_chars=20,
        flush_interval=0.05,
        updates_per_minute=6,
    )
    root = await slack.fake.user_says(CHANNEL, "budget")
    assert await slack.answers(CHANNEL, root) == [reply]
    assert len(slack.fake.calls("chat.update")) <= 2 + 1  # the burst, then only the final edit


async def test_a_post_whose_response_was_lost_is_not_posted_twice(slack: Harness) -> None:
    slack.fake.fail_next("chat.postMessage", lost_response=True)
    reply = paragraphs(3)
    slack.script("lost", reply)
    await slack.start(streaming="edit")
    root = await slack.fake.user_says(CHANNEL, "lost")
    assert await slack.answers(CHANNEL, root) == [reply]
    await slack.settled(CHANNEL, root)
    assert len(slack.fake.calls("chat.postMessage")) == 1
    assert len(slack.fake.bot_messages(CHANNEL, root.ts)) == 1
    assert slack.fake.calls("conversations.replies")


async def test_a_stream_start_whose_response_was_lost_is_not_started_twice(
    slack: Harness,
) -> None:
    slack.fake.fail_next("chat.startStream", lost_response=True)
    reply = paragraphs(3)
    slack.script("lost", reply)
    await slack.start()
    root = await slack.fake.user_says(CHANNEL, "lost")
    assert await slack.answers(CHANNEL, root) == [reply]
    await slack.settled(CHANNEL, root)
    assert len(slack.fake.bot_messages(CHANNEL, root.ts)) == 1


async def test_ok_false_is_never_taken_for_success(slack: Harness) -> None:
    slack.fake.fail_next("chat.appendStream", error="internal_error")
    script = slack.script("refused", "a" * 100, slack.HOLD, "b" * 300, slack.HOLD, "end")
    await slack.start(flush_chars=100)
    root = await slack.fake.user_says(CHANNEL, "refused")
    await asyncio.wait_for(script.holding.wait(), 10)
    await slack.wait_for(lambda: bool(slack.fake.calls("chat.startStream")))
    script.proceed.set()
    await slack.wait_for(lambda: ("chat.appendStream", "internal_error") in slack.fake.refused)
    await slack.wait_for(lambda: "b" * 300 in slack.fake.bot_messages(CHANNEL)[0].text)
    script.proceed.set()
    assert await slack.answers(CHANNEL, root) == [script.text]


async def test_an_interrupted_answer_ends_with_a_marker_and_clears_the_status(
    slack: Harness,
) -> None:
    script = slack.script("stop me", "partial answer", slack.HOLD, "never shown")
    await slack.start()
    root = await slack.fake.user_says(CHANNEL, "stop me")
    await asyncio.wait_for(script.holding.wait(), 10)
    (thread,) = await slack.threads()
    await slack.core.client_for("slack").interrupt(thread.id)
    assert await slack.answers(CHANNEL, root) == ["partial answer\n\n_(interrupted)_"]
    await slack.wait_for(lambda: slack.fake.status_of(CHANNEL, root.ts) == "")
    assert not any(m.stream == "streaming" for m in slack.fake.bot_messages(CHANNEL))


async def test_a_failed_turn_ends_with_an_error_marker_and_clears_the_status(
    slack: Harness,
) -> None:
    slack.script("fail", "so far", RuntimeError("model unavailable"))
    await slack.start()
    root = await slack.fake.user_says(CHANNEL, "fail")
    (answer,) = await slack.answers(CHANNEL, root)
    assert answer.startswith("so far\n\n_(error: ")
    assert "model unavailable" in answer
    await slack.wait_for(lambda: slack.fake.status_of(CHANNEL, root.ts) == "")
    assert not any(m.stream == "streaming" for m in slack.fake.bot_messages(CHANNEL))


async def test_broadcast_mentions_in_model_output_never_ping_and_markdown_text_is_used(
    slack: Harness,
) -> None:
    reply = "Hey <!here> and <!channel>: **bold** and `code`"
    slack.script("ping", reply)
    await slack.start()
    root = await slack.fake.user_says(CHANNEL, "ping")
    assert await slack.answers(CHANNEL, root) == [reply]
    assert slack.fake.pings() == []
    sent = [c for c in slack.fake.calls() if c.method.startswith("chat.")]
    assert all("text" not in c.args for c in sent)
    assert any("markdown_text" in c.args for c in sent)


async def test_a_restart_mid_answer_finishes_the_same_message(slack: Harness) -> None:
    script = slack.script("restart", "before the restart. ", slack.HOLD, "after it.")
    conduit = await slack.start()
    root = await slack.fake.user_says(CHANNEL, "restart")
    await asyncio.wait_for(script.holding.wait(), 10)
    await slack.wait_for(lambda: bool(slack.fake.bot_messages(CHANNEL, root.ts)))
    (first,) = slack.fake.bot_messages(CHANNEL, root.ts)
    await conduit.stop()
    script.proceed.set()
    await slack.start()
    assert await slack.answers(CHANNEL, root) == [script.text]
    assert [m.ts for m in slack.fake.bot_messages(CHANNEL, root.ts)] == [first.ts]
    assert len(slack.fake.calls("chat.startStream")) == 1
    assert len(slack.fake.calls("chat.postMessage")) == 0


async def test_a_stream_nearing_slacks_size_cap_continues_in_a_new_message(
    slack: Harness,
) -> None:
    slack.fake.markdown_limit = 5_000  # Slack's cap on one streamed message, scaled down
    head = paragraphs(40)  # ~10,000 characters
    script = slack.script("big", head, slack.HOLD, "\n\nthe end")
    await slack.start(message_chars=4_800, flush_chars=500)
    root = await slack.fake.user_says(CHANNEL, "big")
    await asyncio.wait_for(script.holding.wait(), 10)
    await slack.wait_for(lambda: len(slack.fake.calls("chat.startStream")) >= 2)
    script.proceed.set()
    await slack.answers(CHANNEL, root)
    shown = slack.fake.rendered_thread(CHANNEL, root.ts)
    assert shown == [part.text for part in split_parts(script.text, 4_800)]
    assert ("chat.appendStream", "msg_too_long") not in slack.fake.refused


async def test_a_ratelimited_answer_with_http_200_is_honoured_too(slack: Harness) -> None:
    slack.fake.fail_next("chat.update", error="ratelimited")
    script = slack.script("polite", "first", slack.HOLD, " and second")
    await slack.start(streaming="edit")
    root = await slack.fake.user_says(CHANNEL, "polite")
    await asyncio.wait_for(script.holding.wait(), 10)
    await slack.wait_for(lambda: bool(slack.fake.calls("chat.postMessage")))
    script.proceed.set()
    assert await slack.answers(CHANNEL, root) == [script.text]
    assert ("chat.update", "ratelimited") in slack.fake.refused


async def _a_reply_while_no_conduit_runs(
    slack: Harness, **settings: Any
) -> tuple[FakeMessage, str, str]:
    """A thread answered once (`first`), its conduit stopped, then Alice's reply `second`
    in it: (the root message, the reply's ore message id, its traceparent)."""
    conduit = await slack.start(**settings)
    root = await slack.fake.user_says(CHANNEL, "first")
    await slack.answers(CHANNEL, root)
    await conduit.stop()
    second = slack.fake.add_message(CHANNEL, "<@UBOT> second", user="UALICE", thread_ts=root.ts)
    message_id = event_id("", slack.fake.team, CHANNEL, second.ts)
    return root, message_id, traceparent_of(message_id)


async def _answered_while_no_conduit_runs(slack: Harness, message_id: str, trace: str) -> None:
    """The reply sent to the core as the conduit would have (so its answer is stored)."""
    (thread,) = await slack.threads()
    context = EventContext(provenance="slack", user="UALICE", traceparent=trace)
    async with await ConduitClient.connect(slack.core.nats_url, name="slack") as client:
        await client.send(
            thread.id, UserMessageEvent(id=message_id, content="second", context=context)
        )


async def test_a_message_posted_by_a_run_that_died_before_recording_it_is_finished(
    slack: Harness,
) -> None:
    """A run posted an answer's first message and was killed before it recorded it in
    the thread; the answer was finished while no conduit ran. The next run gets it in
    the catch-up and finishes that message (found by its metadata), not a second one."""
    root, message_id, trace = await _a_reply_while_no_conduit_runs(slack, streaming="edit")
    orphan = slack.fake.add_message(CHANNEL, "ech", bot_id=slack.fake.bot_id, thread_ts=root.ts)
    payload = {"answer": trace.split("-")[1], "part": 0}
    orphan.metadata = {"event_type": "ore_reply", "event_payload": payload}
    await _answered_while_no_conduit_runs(slack, message_id, trace)
    posts = len(slack.fake.calls("chat.postMessage"))
    await slack.start(streaming="edit")
    assert await slack.answers(CHANNEL, root, 2) == ["echo: first", "echo: second"]
    assert [m.ts for m in slack.fake.bot_messages(CHANNEL, root.ts)][-1] == orphan.ts
    assert len(slack.fake.calls("chat.postMessage")) == posts


async def test_a_stream_started_by_a_run_that_died_before_recording_it_is_finished(
    slack: Harness,
) -> None:
    """A run started a native stream for an answer (`chat.startStream`: no metadata until
    it is stopped) and was killed before it recorded it; the answer was finished while no
    conduit ran. The next run gets it in the catch-up and finishes that stream (found as
    the bot's stream after the user's message, showing the answer's first words), not a
    second message beside it: the thread shows each answer once, nothing half-shown."""
    root, message_id, trace = await _a_reply_while_no_conduit_runs(slack)
    orphan = slack.fake.add_message(CHANNEL, "ech", bot_id=slack.fake.bot_id, thread_ts=root.ts)
    orphan.user, orphan.stream = slack.fake.bot_user, "streaming"  # as chat.startStream left it
    orphan.started_at = slack.fake.clock.now()
    await _answered_while_no_conduit_runs(slack, message_id, trace)
    starts = len(slack.fake.calls("chat.startStream"))
    await slack.start()
    assert await slack.answers(CHANNEL, root, 2) == ["echo: first", "echo: second"]
    assert slack.fake.rendered_thread(CHANNEL, root.ts) == ["echo: first", "echo: second"]
    assert [m.ts for m in slack.fake.bot_messages(CHANNEL, root.ts)][-1] == orphan.ts
    assert not any(m.stream == "streaming" for m in slack.fake.bot_messages(CHANNEL))
    assert len(slack.fake.calls("chat.startStream")) == starts


async def test_a_stream_of_a_run_that_died_before_recording_it_is_finished_mid_answer(
    slack: Harness,
) -> None:
    """As above, but the next run starts while the answer is still being written: it
    joins mid-answer (its first event is a delta), finds the stream and finishes it.
    Messages that do not begin the answer's text are left alone: a person's, another
    bot's, and a stream of ours showing something else. An answer this run saw start
    costs no Slack lookup."""
    script = slack.script("restart", "before the restart. ", slack.HOLD, "after it.", slack.HOLD)
    conduit = await slack.start()
    root = await slack.fake.user_says(CHANNEL, "restart")
    await asyncio.wait_for(script.holding.wait(), 10)
    await slack.wait_for(lambda: bool(slack.fake.bot_messages(CHANNEL, root.ts)))
    (stream,) = slack.fake.bot_messages(CHANNEL, root.ts)
    await conduit.stop()
    (thread,) = await slack.threads()
    async with await ConduitClient.connect(slack.core.nats_url, name="slack") as client:
        await client.set_metadata(thread.id, REPLY_KEY, "{}")  # it was never recorded
    person = slack.fake.add_message(CHANNEL, "before", user="UBOB", thread_ts=root.ts)
    other_bot = slack.fake.add_message(CHANNEL, "before", bot_id="BOTHER", thread_ts=root.ts)
    unrelated = slack.fake.add_message(CHANNEL, "before it all", bot_id="BBOT", thread_ts=root.ts)
    unrelated.stream, unrelated.started_at = "streaming", slack.fake.clock.now()
    await slack.start()
    # An answer this run sees from its start (in another thread) asks Slack nothing...
    lookups = len(slack.fake.calls("conversations.replies"))
    starts = len(slack.fake.calls("chat.startStream"))
    other = await slack.fake.user_says("CRANDOM", "warm up")
    assert await slack.answers("CRANDOM", other) == ["echo: warm up"]
    assert len(slack.fake.calls("conversations.replies")) == lookups
    # ...the one it joins in the middle (a delta first) looks for what it does not know
    # (the code before looked nothing up and started a second stream beside the first).
    script.proceed.set()
    await slack.wait_for(
        lambda: (
            len(slack.fake.calls("conversations.replies")) > lookups
            or len(slack.fake.calls("chat.startStream")) > starts + 1
        )
    )
    script.proceed.set()
    assert await slack.answers(CHANNEL, root) == [script.text]
    assert slack.fake.rendered_thread(CHANNEL, root.ts) == [script.text, "before it all"]
    assert [m.ts for m in slack.fake.bot_messages(CHANNEL, root.ts)] == [stream.ts, unrelated.ts]
    assert stream.stream == "stopped"
    assert (unrelated.stream, unrelated.edits, unrelated.deleted) == ("streaming", 0, False)
    assert (person.text, person.edits, person.deleted) == ("before", 0, False)
    assert (other_bot.text, other_bot.edits, other_bot.deleted) == ("before", 0, False)
    await slack.settled(CHANNEL, root)  # the status the dead run set is cleared


async def test_a_continuation_stream_a_run_died_before_recording_is_finished(
    slack: Harness,
) -> None:
    """A long answer: the run recorded its first message, started the next one (the
    answer continued) and was killed before recording that. The next run resumes from
    the record and finishes that second stream too, instead of starting another."""
    slack.fake.markdown_limit = 5_000
    script = slack.script("big", paragraphs(40), slack.HOLD, "\n\nthe end")
    conduit = await slack.start(message_chars=4_800, flush_chars=500)
    root = await slack.fake.user_says(CHANNEL, "big")
    await asyncio.wait_for(script.holding.wait(), 10)
    await slack.wait_for(lambda: len(slack.fake.calls("chat.startStream")) >= 2)
    (thread,) = await slack.threads()
    async with await ConduitClient.connect(slack.core.nats_url, name="slack") as client:

        async def recorded() -> dict[str, Any]:
            loaded = json.loads((await client.get_thread(thread.id)).metadata[REPLY_KEY])
            assert isinstance(loaded, dict)
            return loaded

        async with asyncio.timeout(10):  # the second stream recorded, then the kill
            while True:
                if len((await recorded())["messages"]) >= 2:
                    break
                await asyncio.sleep(0.05)
        await conduit.stop()
        made = [m.ts for m in slack.fake.bot_messages(CHANNEL, root.ts)]
        record = await recorded()
        assert [m[0] for m in record["messages"]] == made
        record["messages"] = record["messages"][:-1]  # the last one was never recorded
        await client.set_metadata(thread.id, REPLY_KEY, json.dumps(record))
    await slack.start(message_chars=4_800, flush_chars=500)
    script.proceed.set()
    await slack.answers(CHANNEL, root)
    expected = [part.text for part in split_parts(script.text, 4_800)]
    assert slack.fake.rendered_thread(CHANNEL, root.ts) == expected
    assert [m.ts for m in slack.fake.bot_messages(CHANNEL, root.ts)][: len(made)] == made
    assert not any(m.stream == "streaming" for m in slack.fake.bot_messages(CHANNEL))
