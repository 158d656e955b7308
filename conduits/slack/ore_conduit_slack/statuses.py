"""Another endpoint's delivery status of a message written in Slack, as a reaction on it.

On a linked thread (docs/bridging.md) a message written here is copied to the other
endpoints; while one of them retries its copy the message gets
:hourglass_flowing_sand:, once one failed :warning: (the hourglass then removed; removed
too once it is delivered after all). A reaction sits on the message it is about, where
Slack users look for a message's state, notifies no one and adds no message to the
conversation; Slack keeps one reaction per emoji, so a status seen again after a
restart never doubles. (Which endpoint failed and why is in the `delivery` event and
the conduit's log.)
"""

from __future__ import annotations

import structlog

from ore_conduit_slack.api import SlackApi
from ore_conduit_slack.ids import SlackThread, message_of
from ore_core import Role
from ore_core.conduit import ConduitClient, PlatformError
from ore_core.events import DeliveryEvent

__all__ = ["STATUS_REACTIONS", "show_status"]

log = structlog.get_logger("ore.conduit.slack")

STATUS_REACTIONS = {"retrying": "hourglass_flowing_sand", "failed": "warning"}
"""The reaction a message written in Slack gets when another endpoint's copy of it is
retried or failed."""


async def show_status(
    client: ConduitClient, api: SlackApi, thread_id: str, slack: SlackThread, event: DeliveryEvent
) -> None:
    """React on the Slack message whose copy elsewhere is retried or failed (and take
    the hourglass away once it failed, or was delivered after all)."""
    turn = next((t for t in await client.turns(thread_id) if t.id == event.turn), None)
    found = None if turn is None or turn.role != Role.USER else message_of(turn.event_id)
    if found is None or found[0] != slack.channel:
        return  # not a message written in this Slack thread
    ts = found[1]
    reaction = STATUS_REACTIONS.get(event.status)
    if reaction is not None:
        await _react(api, slack, "reactions.add", ts, reaction, "already_reacted")
    if event.status != "retrying":
        hourglass = STATUS_REACTIONS["retrying"]
        await _react(api, slack, "reactions.remove", ts, hourglass, "no_reaction")


async def _react(
    api: SlackApi, slack: SlackThread, method: str, ts: str, name: str, done: str
) -> None:
    try:
        await api.call(method, slack.team, channel=slack.channel, timestamp=ts, name=name)
    except PlatformError as exc:
        if getattr(exc, "error", "") != done:  # `done`: it is as it should be already
            log.warning("reaction not changed", channel=slack.channel, error=exc.detail)
