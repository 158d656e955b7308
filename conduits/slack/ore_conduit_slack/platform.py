"""SlackPlatform: a Slack thread as the engine sees it (`ore_core.conduit.Platform`).

A conversation is a Slack thread, keyed `ENTERPRISE:TEAM:CHANNEL:THREAD_TS`
(`SlackThread.key`). The engine's relayed copies are posted here with
`chat.postMessage`, edited with `chat.update` and deleted with `chat.delete`, every
failure classified once by `SlackApi.once`. Slack takes no idempotency key, so each copy
carries it in message metadata `ore_relay` (`{"key"}`) and the adapter finds what a key
posted (`ReadsBack`): in the thread as listed once per run, or as recorded since. A
post whose response was lost is looked for before it is reported transient, so the
engine's retry never posts it twice.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, ClassVar

from ore_conduit_slack.api import Ambiguous, SlackApi, SlackError
from ore_conduit_slack.ids import SlackThread
from ore_conduit_slack.text import neutralise
from ore_core.conduit import Capabilities, Inbound, Part

__all__ = ["RELAY_EVENT", "SlackPlatform", "relay_key"]

RELAY_EVENT = "ore_relay"
"""Slack message metadata event type of a relayed copy (payload: `{"key"}`, its part's
`part_key`)."""
_GONE = frozenset({"message_not_found"})  # chat.delete of what is deleted already


def relay_key(message: dict[str, Any]) -> str:
    """The `ore_relay` key of a listed message ("" if it is no relayed copy)."""
    metadata = message.get("metadata") or {}
    payload = metadata.get("event_payload") if isinstance(metadata, dict) else None
    if metadata.get("event_type") != RELAY_EVENT or not isinstance(payload, dict):
        return ""
    return str(payload.get("key") or "")


class SlackPlatform:
    """Slack's Web API in the engine's words (see the module docstring)."""

    capabilities: ClassVar[Capabilities] = Capabilities(
        edit=True,
        delete=True,
        threads=True,
        streaming=True,
        max_message_length=11_000,
        markup="markdown",
        edits_arrive=True,
        deletes_arrive=True,
        reactions=True,
        idempotency="read_back",
    )

    def __init__(self, api: SlackApi) -> None:
        self.api = api
        self._posted: dict[str, dict[str, str]] = {}  # conversation -> key -> ts

    async def connect(self) -> None:
        """Nothing to open: the conduit checked the tokens and serves Slack's events."""

    async def close(self) -> None:
        """Nothing to close."""

    async def events(self) -> AsyncIterator[Inbound]:
        """None through here yet: the conduit's `Inbound` takes Slack's events."""
        nothing: tuple[Inbound, ...] = ()
        for event in nothing:
            yield event

    async def post(self, conversation: str, part: Part, key: str) -> str:
        thread = SlackThread.parse(conversation)
        metadata = {"event_type": RELAY_EVENT, "event_payload": {"key": key}}
        try:
            reply = await self.api.once(
                "chat.postMessage",
                thread.team,
                channel=thread.channel,
                thread_ts=thread.thread_ts,
                markdown_text=neutralise(part.text),
                metadata=metadata,
            )
        except Ambiguous:
            self._posted.pop(conversation, None)  # listed again: it may be there now
            if (found := await self.find(conversation, key)) is not None:
                return found
            raise
        ts = str(reply["ts"])
        (await self._listed(conversation))[key] = ts
        return ts

    async def edit(self, conversation: str, platform_id: str, part: Part) -> None:
        thread = SlackThread.parse(conversation)
        await self.api.once(
            "chat.update",
            thread.team,
            channel=thread.channel,
            ts=platform_id,
            markdown_text=neutralise(part.text),
        )

    async def delete(self, conversation: str, platform_id: str) -> None:
        thread = SlackThread.parse(conversation)
        try:
            await self.api.once("chat.delete", thread.team, channel=thread.channel, ts=platform_id)
        except SlackError as exc:
            if exc.error not in _GONE:
                raise

    async def find(self, conversation: str, key: str) -> str | None:
        """The ts of the copy `key` posted (by this run, or by one killed before it
        reported it), None if the thread has none."""
        return (await self._listed(conversation)).get(key)

    async def _listed(self, conversation: str) -> dict[str, str]:
        """key -> ts of the thread's relayed copies, listed once per run."""
        known = self._posted.get(conversation)
        if known is None:
            thread = SlackThread.parse(conversation)
            replies = await self.api.once(
                "conversations.replies",
                thread.team,
                channel=thread.channel,
                ts=thread.thread_ts,
                include_all_metadata=True,
                limit=1000,
            )
            listed = replies.get("messages") or []
            known = {relay_key(m): str(m["ts"]) for m in listed if relay_key(m)}
            self._posted[conversation] = known
        return known
