"""The `ore_regenerate` message shortcut: another answer to a question, in its thread.

Slack sends a `message_action` naming the message the shortcut was used on. The turn
the core answers again is found from that message alone, so it holds after a restart:

- a person's message is the user turn it was sent as (its event id);
- one of the bot's answers carries `ore_reply` metadata naming its answer (the trace id
  of its traceparent); the core stored that answer's `turn_complete` with the same
  traceparent, whose turn the core climbs from to its question;
- a relayed copy carries `ore_relay` metadata with its part's key (`part_key` of its
  thread and turn), which names the turn it copies among the thread's turns.

Slack does not promise the message's metadata in the payload, so the bot's message is
read back from the thread (`conversations.replies`) when the payload lacks it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ore_conduit_slack.answer import relay_key, reply_payload
from ore_conduit_slack.api import SlackApi
from ore_conduit_slack.ids import SlackThread
from ore_core import EventDecodeError, OutputEvent, Role, TurnCompleteEvent
from ore_core.conduit import ConduitClient, part_key
from ore_core.events import decode_output_value

if TYPE_CHECKING:
    from ore_conduit_slack.inbound import Identity

__all__ = ["REGENERATE", "answer_turn", "marked_turn", "regenerated_turn", "relayed_turn"]

REGENERATE = "ore_regenerate"
"""The callback id of the message shortcut (the app manifest's `shortcuts`)."""

_PAGE = 1000  # stored events read per call while looking for an answer
_PARTS = 64  # parts of one relayed copy looked at (a copy has a handful)


def marked_turn(message: Mapping[str, Any]) -> tuple[str, str]:
    """What a bot message's metadata names: ("answer", trace id) for an answer,
    ("relay", its part's key) for a relayed copy, ("", "") for neither."""
    answer = reply_payload(dict(message)).get("answer")
    if answer:
        return "answer", str(answer)
    key = relay_key(dict(message))
    return ("relay", key) if key else ("", "")


async def relayed_turn(client: ConduitClient, thread_id: str, key: str) -> str | None:
    """The turn whose relayed copy has a part of `key` (None: none of the thread's)."""
    for turn in await client.turns(thread_id):
        if any(part_key(f"{thread_id}.{turn.id}", part) == key for part in range(_PARTS)):
            return turn.id
    return None


async def regenerated_turn(
    client: ConduitClient,
    api: SlackApi,
    bot: Identity,
    thread: SlackThread,
    thread_id: str,
    message: Mapping[str, Any],
    asked_on: str,
) -> str | None:
    """The turn `message` (event id `asked_on`) stands for: a person's message its own,
    the bot's answer its answer turn, a relayed copy the turn it copies."""
    own = message.get("user") == bot.user_id or (
        bool(message.get("bot_id")) and message.get("bot_id") == bot.bot_id
    )
    if not own:
        return asked_on
    kind, ref = marked_turn(message)
    if not kind:  # Slack does not promise the metadata in the payload: read it back
        replies = await api.call(
            "conversations.replies",
            thread.team,
            channel=thread.channel,
            ts=thread.thread_ts,
            include_all_metadata=True,
            limit=1000,
        )
        listed = replies.get("messages") or []
        kind, ref = marked_turn(next((m for m in listed if m.get("ts") == message.get("ts")), {}))
    if kind == "answer":
        return await answer_turn(client, thread_id, ref)
    if kind == "relay":
        return await relayed_turn(client, thread_id, ref)
    return None


async def answer_turn(client: ConduitClient, thread_id: str, trace_id: str) -> str | None:
    """The id of the answer turn whose stored `turn_complete` carries `trace_id` (None:
    the thread has none, e.g. an answer that never finished)."""
    after = 0
    while True:
        page = await client.read_events(thread_id, after=after, limit=_PAGE)
        for stored in page.get("events") or []:
            for event in _stored_events(stored.get("event")):
                if (
                    isinstance(event, TurnCompleteEvent)
                    and event.turn.role == Role.ASSISTANT
                    and event.context.traceparent.split("-")[1:2] == [trace_id]
                ):
                    return event.turn.id
        following = page.get("next")
        if following is None:
            return None
        after = int(following)


def _stored_events(value: Any) -> list[OutputEvent]:
    """The output events of one stored entry (a batch holds several); what does not
    decode is skipped."""
    items = (
        value.get("events")
        if isinstance(value, Mapping) and value.get("kind") == "batch"
        else [value]
    )
    events = []
    for item in items or []:
        try:
            events.append(decode_output_value(item))
        except EventDecodeError:
            continue
    return events
