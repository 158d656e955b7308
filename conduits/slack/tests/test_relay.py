"""Slack on a linked thread (issue 29): another endpoint's messages are posted in the
Slack thread with their label (split when longer than a message), edited in place and
deleted through the platform id map, and never posted twice; other endpoints' answers
are posted when the gateway answers `all`; a Slack message whose copy elsewhere is
retried or failed gets a reaction. Real core and nats-server, the fake Slack."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ore_core import Role, Turn, TurnCompleteEvent, UserMessageEvent
from ore_core.conduit import ConduitClient, ControlClient, part_key, split_message, turn_text
from ore_core.events import EventContext

if TYPE_CHECKING:
    from ore_conduit_slack.testing.fake import FakeMessage
    from tests.conftest import Harness

CHANNEL = "CGENERAL"


async def linked_terminal(
    slack: Harness, answer: str = "origin", **settings: Any
) -> tuple[ConduitClient, str, FakeMessage]:
    """A Slack thread with one answered message, linked to the terminal (`stdin:id=T`)."""
    await slack.start(**settings)
    root = await slack.fake.user_says(CHANNEL, "hi")
    await slack.answers(CHANNEL, root)
    thread = (await slack.core.thread_holding("hi")).id
    endpoint = {"namespace": "stdin", "key": "id", "value": thread}
    link = {"thread": thread, "endpoint": endpoint, "answer": answer}
    await ControlClient.beside(slack.core.client).call("links.add", link)
    return slack.core.client_for("stdin"), thread, root


async def recorded(terminal: ConduitClient, thread: str, text: str) -> Turn:
    """The user turn of `text`, once the core recorded it."""
    async with terminal.events(thread, kinds={"turn_complete"}) as feed:
        for turn in await terminal.turns(thread):
            if turn.role == Role.USER and turn_text(turn) == text:
                return turn
        async for delivery in feed:
            event = delivery.event
            if isinstance(event, TurnCompleteEvent) and turn_text(event.turn) == text:
                return event.turn
    raise AssertionError("the feed ended")


async def test_a_terminal_message_is_posted_in_the_slack_thread_with_its_label(
    slack: Harness,
) -> None:
    terminal, thread, root = await linked_terminal(slack)
    await terminal.send(thread, "hello from the terminal", id="s-1", user_name="ana")
    shown = "ana (stdin): hello from the terminal"
    await slack.wait_for(lambda: shown in slack.fake.rendered_thread(CHANNEL, root.ts))
    assert slack.fake.rendered_thread(CHANNEL, root.ts).count(shown) == 1


async def test_an_edit_changes_the_copy_in_place(slack: Harness) -> None:
    terminal, thread, root = await linked_terminal(slack)
    await terminal.send(thread, "helo", id="s-1", user_name="ana")
    await slack.wait_for(
        lambda: "ana (stdin): helo" in slack.fake.rendered_thread(CHANNEL, root.ts)
    )
    first = (await terminal.turns(thread))[-2]  # the terminal's message, then its answer
    edit = UserMessageEvent(
        id="s-1-edit",
        content="hello",
        metadata={"edit_of": first.id},
        context=EventContext(provenance="stdin", user_name="ana"),
    )
    await terminal.send(thread, edit)
    await slack.wait_for(
        lambda: "ana (stdin): hello" in slack.fake.rendered_thread(CHANNEL, root.ts)
    )
    rendered = slack.fake.rendered_thread(CHANNEL, root.ts)
    assert "ana (stdin): helo" not in rendered
    assert len(slack.fake.calls("chat.update")) >= 1


async def test_a_deleted_message_s_copy_is_deleted(slack: Harness) -> None:
    terminal, thread, root = await linked_terminal(slack)
    await terminal.send(thread, "oops", id="s-1", user_name="ana")
    shown = "ana (stdin): oops"
    await slack.wait_for(lambda: shown in slack.fake.rendered_thread(CHANNEL, root.ts))
    turn = (await terminal.turns(thread))[-2]
    await terminal.delete(thread, turn.id, id="s-1-del")
    await slack.wait_for(lambda: shown not in slack.fake.rendered_thread(CHANNEL, root.ts))


async def test_a_copy_longer_than_a_message_is_split_and_every_part_reported(
    slack: Harness,
) -> None:
    terminal, thread, root = await linked_terminal(slack, message_chars=200)
    text = "word " * 100  # 500 characters, no line break
    await terminal.send(thread, text, id="s-1", user_name="ana")
    shown = f"ana (stdin): {text}"
    copies = slack.fake.bot_messages(CHANNEL, root.ts)

    def posted() -> list[str]:
        return [m.text for m in slack.fake.bot_messages(CHANNEL, root.ts)[len(copies) :]]

    await slack.wait_for(lambda: "".join(posted()).startswith(shown))
    turn = await recorded(terminal, thread, text)
    await terminal.send(thread, "next", id="s-2", user_name="ana")
    await slack.wait_for(lambda: "ana (stdin): next" in posted())  # the first was reported
    slack_side = slack.core.client_for("slack")
    parts = slack.fake.bot_messages(CHANNEL, root.ts)[len(copies) : len(copies) + 3]
    assert "".join(m.text for m in parts) == shown
    assert all(len(m.text) <= 200 for m in parts)
    assert await slack_side.delivery_get(thread, turn.id) == [m.ts for m in parts]


async def test_another_endpoint_s_answer_is_posted_when_the_gateway_answers_all(
    slack: Harness,
) -> None:
    terminal, thread, root = await linked_terminal(slack, answer="all")
    await terminal.send(thread, "what time is it", id="s-1", user_name="ana")
    await slack.wait_for(
        lambda: "echo: what time is it" in slack.fake.rendered_thread(CHANNEL, root.ts)
    )
    rendered = slack.fake.rendered_thread(CHANNEL, root.ts)
    assert rendered.count("echo: what time is it") == 1
    assert rendered.index("ana (stdin): what time is it") < rendered.index("echo: what time is it")


async def test_another_endpoint_s_answer_is_not_posted_when_the_gateway_answers_origin(
    slack: Harness,
) -> None:
    terminal, thread, root = await linked_terminal(slack)
    await terminal.send(thread, "one", id="s-1", user_name="ana")
    await terminal.send(thread, "two", id="s-2", user_name="ana")
    await slack.wait_for(lambda: "ana (stdin): two" in slack.fake.rendered_thread(CHANNEL, root.ts))
    assert "echo: one" not in slack.fake.rendered_thread(CHANNEL, root.ts)


async def status_of_a_slack_message(slack: Harness, *statuses: str) -> FakeMessage:
    """A Slack message of a thread linked to the terminal, whose copy the terminal
    reports with each of `statuses` in turn."""
    terminal, thread, root = await linked_terminal(slack)
    said = await slack.fake.user_says(CHANNEL, "see you", thread_ts=root.ts)
    turn = await recorded(terminal, thread, "see you")
    for status in statuses:
        await terminal.report_delivery(
            thread, sequence=1, turn=turn.id, status=status, detail="the terminal is away"
        )
    return said


async def test_a_slack_message_whose_copy_is_retried_elsewhere_gets_an_hourglass(
    slack: Harness,
) -> None:
    said = await status_of_a_slack_message(slack, "retrying")
    await slack.wait_for(lambda: said.reactions == {"hourglass_flowing_sand"})


async def test_a_slack_message_whose_copy_failed_elsewhere_gets_a_warning_instead(
    slack: Harness,
) -> None:
    said = await status_of_a_slack_message(slack, "retrying", "failed")
    await slack.wait_for(lambda: said.reactions == {"warning"})
    assert len(slack.fake.calls("reactions.add")) == 2


async def test_a_split_copy_begun_by_a_killed_run_is_finished_without_posting_a_part_twice(
    slack: Harness,
) -> None:
    terminal, thread, root = await linked_terminal(slack, message_chars=200)
    await slack.stop()
    text = "word " * 100
    await terminal.send(thread, text, id="s-1", user_name="ana")
    turn = await recorded(terminal, thread, text)
    shown = f"ana (stdin): {text}"
    first = split_message(shown, 200)[0]
    # What a run killed after posting the first part (and before reporting) left.
    left = slack.fake.add_message(CHANNEL, first, bot_id=slack.fake.bot_id, thread_ts=root.ts)
    left.user = slack.fake.bot_user
    key = part_key(f"{thread}.{turn.id}", 0)  # the key the copy engine gives its first part
    left.metadata = {"event_type": "ore_relay", "event_payload": {"key": key}}
    await slack.start()
    slack_side = slack.core.client_for("slack")

    def copies() -> list[str]:
        return [m.text for m in slack.fake.bot_messages(CHANNEL, root.ts) if m.text != "echo: hi"]

    await slack.wait_for(lambda: "".join(copies()) == shown)
    await terminal.send(thread, "next", id="s-2", user_name="ana")
    await slack.wait_for(lambda: "ana (stdin): next" in copies())  # the first was reported
    ids = await slack_side.delivery_get(thread, turn.id)
    assert len(ids) == 3
    assert ids[0] == left.ts
    assert "".join(copies()[:3]) == shown


async def test_a_slack_thread_linked_to_a_terminal_thread_shows_what_is_typed_there(
    slack: Harness,
) -> None:
    await slack.start()
    root = slack.fake.add_message(CHANNEL, "our thread", user="UALICE")
    terminal = slack.core.client_for("stdin")
    thread = await terminal.create_thread()
    key = f"-:{slack.fake.team}:{CHANNEL}:{root.ts}"
    endpoint = {"namespace": "slack", "key": "slack.thread", "value": key}
    await ControlClient.beside(slack.core.client).call(
        "links.add", {"thread": thread, "endpoint": endpoint}
    )
    await terminal.send(thread, "from the terminal", id="s-1", user_name="ana")
    shown = "ana (stdin): from the terminal"
    await slack.wait_for(lambda: shown in slack.fake.rendered_thread(CHANNEL, root.ts))


async def test_the_hourglass_goes_once_the_copy_is_delivered_after_all(slack: Harness) -> None:
    said = await status_of_a_slack_message(slack, "retrying", "delivered")
    await slack.wait_for(lambda: len(slack.fake.calls("reactions.remove")) == 1)
    assert said.reactions == set()


async def next_event(feed: Any, kind: str) -> Any:
    """The next event of `kind` the terminal's feed delivers (a user turn's, for
    `turn_complete`)."""
    async for delivery in feed:
        event = delivery.event
        if event.kind == kind and (kind != "turn_complete" or event.turn.role == Role.USER):
            return event
    raise AssertionError("the feed ended")


async def test_a_slack_message_reaches_the_other_endpoint_with_the_sender_s_name(
    slack: Harness,
) -> None:
    terminal, thread, root = await linked_terminal(slack)
    slack.fake.user_names["UBOB"] = "Bob Builder"
    asked = len(slack.fake.calls("users.info"))
    async with terminal.events(thread, kinds={"turn_complete"}) as feed:
        for text in ("hello there", "again"):
            await slack.fake.user_says(CHANNEL, text, user="UBOB", thread_ts=root.ts)
            event = await next_event(feed, "turn_complete")
            assert dict(event.turn.extra)["sender"] == "Bob Builder"
    assert len(slack.fake.calls("users.info")) == asked + 1  # asked once, then cached


async def test_a_slack_edit_of_an_older_message_reaches_the_other_endpoint_as_an_edit(
    slack: Harness,
) -> None:
    terminal, thread, root = await linked_terminal(slack)
    await slack.fake.user_says(CHANNEL, "later", thread_ts=root.ts)
    await slack.answers(CHANNEL, root, 2)
    first = await recorded(terminal, thread, "hi")
    async with terminal.events(thread, kinds={"turn_complete"}) as feed:
        await slack.fake.deliver(
            slack.fake.callback(slack.fake.edit_event(root, f"<@{slack.fake.bot_user}> hi!"))
        )
        event = await next_event(feed, "turn_complete")
    assert dict(event.turn.extra)["edit_of"] == first.id
    assert turn_text(event.turn) == "hi!"
    await slack.fake.user_says(CHANNEL, "sentinel", thread_ts=root.ts)
    answers = await slack.answers(CHANNEL, root, 3)
    assert answers == ["echo: hi", "echo: later", "echo: sentinel"]  # not answered again


async def test_a_slack_delete_reaches_the_other_endpoint(slack: Harness) -> None:
    terminal, thread, root = await linked_terminal(slack)
    question = await recorded(terminal, thread, "hi")
    async with terminal.events(thread, kinds={"turn_deleted"}) as feed:
        await slack.fake.deliver(slack.fake.callback(slack.fake.delete_event(root)))
        event = await next_event(feed, "turn_deleted")
    assert event.turn == question.id
