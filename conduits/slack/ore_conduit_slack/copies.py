"""Bridging in a Slack thread: other endpoints' messages, answers and delivery statuses.

On a linked thread (docs/bridging.md) the thread's renderer hands every event of
another endpoint to `RelayedCopies`, which:

- posts a relayed message with its label, split at `message_chars` by
  `relay.split_message` (code fences kept whole), each part tagged with Slack message
  metadata `ore_relay` (`{"turn", "part"}`) and every part's `ts` reported delivered in
  one report. A conduit killed mid-way finds the parts it posted in the thread
  (`conversations.replies`) and posts only the rest: each part is posted once;
- edits a copy in place (parts updated, added or deleted as the new text needs) and
  deletes a deleted message's copy, through the platform id map;
- posts the final text of another endpoint's answer when the gateway answers `all`
  (Slack gets no live deltas of it: the answer's `turn_complete`), as a copy like the
  others;
- shows another endpoint's delivery status of a message written in this Slack thread as
  a reaction on that message: :hourglass_flowing_sand: while it is retried, :warning:
  once it failed (the hourglass then removed; removed too once it is delivered after
  all). A reaction sits on the message it is
  about, where Slack users look for a message's state, notifies no one and adds no
  message to the conversation; Slack keeps one reaction per emoji, so a status seen
  again after a restart never doubles. (Which endpoint failed and why is in the
  `delivery` event and the conduit's log, not in the reaction.)
"""

from __future__ import annotations

import structlog

from ore_conduit_slack.api import Ambiguous, SlackApi, SlackError
from ore_conduit_slack.config import SlackConfig
from ore_conduit_slack.ids import SlackThread, message_of
from ore_conduit_slack.text import neutralise
from ore_core import Role
from ore_core.conduit import ConduitClient, Delivery, Relayed, metrics, split_message
from ore_core.events import DeliveryEvent

__all__ = ["RELAY_EVENT", "STATUS_REACTIONS", "RelayedCopies"]

log = structlog.get_logger("ore.conduit.slack")

RELAY_EVENT = "ore_relay"
"""Slack message metadata event type of a relayed copy (payload: `{"turn", "part"}`)."""
STATUS_REACTIONS = {"retrying": "hourglass_flowing_sand", "failed": "warning"}
"""The reaction a message written in Slack gets when another endpoint's copy of it is
retried or failed."""


class RelayedCopies:
    """Another endpoint's events shown in one Slack thread (see the module docstring)."""

    def __init__(
        self,
        client: ConduitClient,
        api: SlackApi,
        config: SlackConfig,
        thread_id: str,
        slack: SlackThread,
    ) -> None:
        self.client = client
        self.api = api
        self.config = config
        self.thread_id = thread_id
        self.slack = slack
        self._posted: dict[str, dict[int, str]] | None = None  # turn -> part -> ts

    async def show(self, delivery: Delivery, relayed: Relayed, sequence: int) -> None:
        """Show one classified event of another endpoint (a stored one: `sequence`)."""
        event = delivery.event
        if relayed.action == "relayed":
            await self._post(relayed, sequence)
        elif relayed.action == "edited":
            await self._edit(relayed, sequence)
        elif relayed.action == "deleted":
            await self._delete(relayed.turn_id)
        elif relayed.action == "answer" and relayed.turn_id:  # a finished answer
            await self._post(relayed, sequence)
        elif relayed.action == "delivery" and isinstance(event, DeliveryEvent):
            await self._show_status(event)

    async def show_notice(self, text: str) -> None:
        """Post a thread-wide notice (provenance `app`, e.g. a compaction's one line).
        It is live-only, so it comes once and is posted once; a refusal is logged, not
        retried (the thread's history holds what it says)."""
        for part in split_message(neutralise(text), self.config.message_chars):
            try:
                await self.api.call(
                    "chat.postMessage",
                    self.slack.team,
                    channel=self.slack.channel,
                    thread_ts=self.slack.thread_ts,
                    markdown_text=part,
                )
            except (SlackError, Ambiguous) as exc:
                log.info("notice not shown", thread_id=self.thread_id, error=str(exc))
                return

    def _parts(self, relayed: Relayed) -> list[str]:
        return split_message(neutralise(relayed.shown), self.config.message_chars)

    # -- copies ----------------------------------------------------------------------

    async def _post(self, relayed: Relayed, sequence: int) -> None:
        """Post the copy's parts not posted yet, then report them all delivered."""
        if await self.client.delivery_get(self.thread_id, relayed.turn_id):
            return  # posted and reported before a restart (the feed position was not saved)
        posted = (await self._posted_copies()).setdefault(relayed.turn_id, {})
        parts = self._parts(relayed)
        for part, text in enumerate(parts):
            if part in posted:  # posted by a run killed before it reported the copy
                continue
            ts = await self._post_part(relayed, sequence, part, text)
            if ts is None:
                return
            posted[part] = ts
        await self._report(relayed, sequence, [posted[part] for part in range(len(parts))])

    async def _post_part(self, relayed: Relayed, sequence: int, part: int, text: str) -> str | None:
        """Post one part; its ts. None: Slack refused it (reported `failed`). A rate
        limit delays the part, never drops it: reported `retrying` once, then waited out."""
        reported: list[bool] = []

        async def throttled() -> None:
            if not reported:
                reported.append(True)
                await self.client.report_delivery(
                    self.thread_id,
                    sequence=sequence,
                    turn=relayed.turn_id,
                    origin=relayed.origin,
                    status="retrying",
                    detail="rate limited by Slack",
                )

        try:
            reply = await self.api.call(
                "chat.postMessage",
                self.slack.team,
                throttled=throttled,
                channel=self.slack.channel,
                thread_ts=self.slack.thread_ts,
                markdown_text=text,
                metadata={
                    "event_type": RELAY_EVENT,
                    "event_payload": {"turn": relayed.turn_id, "part": part},
                },
            )
        except (SlackError, Ambiguous) as exc:
            metrics.delivery_failed(self.client.namespace)
            await self.client.report_delivery(
                self.thread_id,
                sequence=sequence,
                turn=relayed.turn_id,
                origin=relayed.origin,
                status="failed",
                detail=str(exc),
            )
            return None
        metrics.delivered(self.client.namespace)
        return str(reply["ts"])

    async def _edit(self, relayed: Relayed, sequence: int) -> None:
        """Show the edited text in the copy's messages (more or fewer as it needs)."""
        copies = await self.client.delivery_get(self.thread_id, relayed.edit_of)
        if not copies:
            await self._post(relayed, sequence)
            return
        parts = self._parts(relayed)
        ids: list[str] = []
        for part, text in enumerate(parts):
            if part < len(copies):
                await self.api.call(
                    "chat.update",
                    self.slack.team,
                    channel=self.slack.channel,
                    ts=copies[part],
                    markdown_text=text,
                )
                ids.append(copies[part])
            else:
                ts = await self._post_part(relayed, sequence, part, text)
                if ts is None:
                    return
                ids.append(ts)
        for ts in copies[len(parts) :]:
            await self._delete_message(ts)
        await self._report(relayed, sequence, ids)

    async def _delete(self, turn_id: str) -> None:
        for ts in await self.client.delivery_get(self.thread_id, turn_id):
            await self._delete_message(ts)

    async def _delete_message(self, ts: str) -> None:
        try:
            await self.api.call("chat.delete", self.slack.team, channel=self.slack.channel, ts=ts)
        except SlackError as exc:  # deleted already (message_not_found)
            log.info("copy not deleted", thread_id=self.thread_id, error=exc.error)

    async def _posted_copies(self) -> dict[str, dict[int, str]]:
        """turn -> part -> ts of the copies the Slack thread shows (its bot messages with
        `ore_relay` metadata), listed once per renderer: a copy posted by a conduit
        killed before it reported it is found here, not posted twice."""
        if self._posted is not None:
            return self._posted
        posted: dict[str, dict[int, str]] = {}
        try:
            replies = await self.api.call(
                "conversations.replies",
                self.slack.team,
                channel=self.slack.channel,
                ts=self.slack.thread_ts,
                include_all_metadata=True,
                limit=1000,
            )
        except (SlackError, Ambiguous) as exc:
            log.warning("cannot list the slack thread", thread_id=self.thread_id, error=str(exc))
            return posted  # not kept: asked again for the next copy
        for message in replies.get("messages") or []:
            metadata = message.get("metadata") or {}
            payload = metadata.get("event_payload") or {}
            if metadata.get("event_type") == RELAY_EVENT and isinstance(payload, dict):
                part = payload.get("part", 0)
                turn = posted.setdefault(str(payload.get("turn")), {})
                turn[part if isinstance(part, int) else 0] = str(message["ts"])
        self._posted = posted
        return posted

    async def _report(self, relayed: Relayed, sequence: int, ids: list[str]) -> None:
        await self.client.report_delivery(
            self.thread_id,
            sequence=sequence,
            turn=relayed.turn_id,
            origin=relayed.origin,
            status="delivered",
            platform_ids=ids,
        )

    # -- delivery statuses -------------------------------------------------------------

    async def _show_status(self, event: DeliveryEvent) -> None:
        """React on the Slack message whose copy elsewhere is retried or failed (and take
        the hourglass away once it failed, or was delivered after all)."""
        turn = next(
            (t for t in await self.client.turns(self.thread_id) if t.id == event.turn), None
        )
        found = None if turn is None or turn.role != Role.USER else message_of(turn.event_id)
        if found is None or found[0] != self.slack.channel:
            return  # not a message written in this Slack thread
        channel, ts = found
        reaction = STATUS_REACTIONS.get(event.status)
        if reaction is not None:
            await self._react("reactions.add", channel, ts, reaction, "already_reacted")
        if event.status != "retrying":
            hourglass = STATUS_REACTIONS["retrying"]
            await self._react("reactions.remove", channel, ts, hourglass, "no_reaction")

    async def _react(self, method: str, channel: str, ts: str, name: str, done: str) -> None:
        try:
            await self.api.call(method, self.slack.team, channel=channel, timestamp=ts, name=name)
        except SlackError as exc:
            if exc.error != done:  # `done`: it is as it should be already
                log.warning("reaction not changed", thread_id=self.thread_id, error=exc.error)
        except Ambiguous as exc:
            log.warning("reaction not changed", thread_id=self.thread_id, error=str(exc))
