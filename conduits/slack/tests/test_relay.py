"""Slack on a linked thread (issue 29): another endpoint's messages are posted in the
Slack thread with their label, edited in place and deleted through the platform id
map, and never posted twice. Real core and nats-server, the fake Slack."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ore_core import UserMessageEvent
from ore_core.conduit import ConduitClient
from ore_core.events import EventContext

if TYPE_CHECKING:
    from ore_conduit_slack.testing.fake import FakeMessage
    from tests.conftest import Harness

CHANNEL = "CGENERAL"


async def linked_terminal(slack: Harness) -> tuple[ConduitClient, str, FakeMessage]:
    """A Slack thread with one answered message, linked to the terminal (`stdin:id=T`)."""
    await slack.start()
    root = await slack.fake.user_says(CHANNEL, "hi")
    await slack.answers(CHANNEL, root)
    thread = (await slack.core.thread_holding("hi")).id
    endpoint = {"namespace": "stdin", "key": "id", "value": thread}
    await slack.core.client.admin_call("links.add", {"thread": thread, "endpoint": endpoint})
    return slack.core.client_for("stdin"), thread, root


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
