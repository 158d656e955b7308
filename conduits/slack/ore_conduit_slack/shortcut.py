"""The `ore_regenerate` message shortcut: another answer to a question, in its thread.

Slack sends a `message_action` naming the message the shortcut was used on. The turn
the core answers again is found from that message alone, so it holds after a restart:

- a person's message is the user turn it was sent as (its event id);
- one of the bot's answers carries `ore_reply` metadata naming its answer (the trace id
  of its traceparent); the core stored that answer's `turn_complete` with the same
  traceparent, whose turn the core climbs from to its question;
- a relayed copy carries `ore_relay` metadata naming the turn it copies.

Slack does not promise the message's metadata in the payload, so the bot's message is
read back from the thread (`conversations.replies`) when the payload lacks it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ore_conduit_slack.answer import reply_payload
from ore_conduit_slack.copies import RELAY_EVENT
from ore_core import EventDecodeError, OutputEvent, Role, TurnCompleteEvent
from ore_core.conduit import ConduitClient
from ore_core.events import decode_output_value

__all__ = ["REGENERATE", "answer_turn", "marked_turn"]

REGENERATE = "ore_regenerate"
"""The callback id of the message shortcut (the app manifest's `shortcuts`)."""

_PAGE = 1000  # stored events read per call while looking for an answer


def marked_turn(message: Mapping[str, Any]) -> tuple[str, str]:
    """What a bot message's metadata names: ("answer", trace id) for an answer,
    ("turn", turn id) for a relayed copy, ("", "") for neither."""
    answer = reply_payload(dict(message)).get("answer")
    if answer:
        return "answer", str(answer)
    metadata = message.get("metadata") or {}
    payload = metadata.get("event_payload") if isinstance(metadata, Mapping) else None
    if metadata.get("event_type") == RELAY_EVENT and isinstance(payload, Mapping):
        turn = payload.get("turn")
        if turn:
            return "turn", str(turn)
    return "", ""


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
