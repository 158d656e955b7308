"""Relayed copies: another endpoint's messages on a linked thread, shown in its chat.

A user message written on another endpoint (a Slack thread, a terminal, a NATS channel)
is posted in the chat with its label (`Ana (slack): hello`), as plain text split at
`message_chars`; Telegram's own messages are never echoed (`classify`). Each copy is
reported to the core (`deliveries.report`) with its messages (`CHAT:MESSAGE`), so an
edit on the other endpoint edits it in place (`editMessageText`, part by part) and a
delete deletes it (`deleteMessage`), after any restart.

Flood control delays a copy, reported `retrying` once; one still refused after
`relay_deadline` seconds, or refused for good (the bot blocked, the chat gone), is
reported `failed` (the origin endpoint shows it) and the next copy goes on.

Telegram cannot be asked what a chat shows. A copy already reported is never posted
again; the parts of one not reported yet are recorded in the conduit's state as each is
sent, so a restarted conduit sends only the parts it has no record of. A double remains
possible where the conduit cannot know: killed while a part's `sendMessage` is in flight
(Telegram accepted it; its answer was not read or not recorded yet), or a send whose
answer was lost (a dropped connection, a 5xx) that Telegram had carried out, which
`BotApi` sends again.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import structlog

from ore_conduit_telegram.api import TelegramError
from ore_conduit_telegram.shield import uninterrupted
from ore_conduit_telegram.text import to_html
from ore_core import Role, TurnCompleteEvent
from ore_core.conduit import Delivery, Relayed, metrics, split_message, turn_text
from ore_core.events import DeliveryEvent, DeliveryStatus

if TYPE_CHECKING:
    from ore_conduit_telegram.outbound import ThreadRenderer

__all__ = ["Copies", "platform_id"]

log = structlog.get_logger("ore.conduit.telegram")


def platform_id(chat: int, message: int) -> str:
    """The platform id of a Telegram message as the delivery map keeps it (message ids
    are numbered per chat)."""
    return f"{chat}:{message}"


def _message_of(pid: str) -> int:
    try:
        return int(pid.rpartition(":")[2])
    except ValueError:
        return 0


class _Undelivered(Exception):
    """A copy that cannot be delivered: reported failed with `detail`."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class Copies:
    """The relayed copies of one thread, for its renderer (which knows the chat)."""

    def __init__(self, renderer: ThreadRenderer) -> None:
        self.renderer = renderer
        self.out = renderer.out
        self.thread_id = renderer.thread_id

    async def show(self, relayed: Relayed, delivery: Delivery) -> None:
        """Post, edit or delete the copy `relayed` says, or show a failed delivery."""
        sequence = delivery.sequence
        if sequence is None:
            return  # live-only: a copy comes with a stored batch
        event = delivery.event
        if relayed.action == "answer":
            if isinstance(event, TurnCompleteEvent) and event.turn.role == Role.ASSISTANT:
                answer = Relayed(
                    "relayed", relayed.origin, event.turn.id, text=turn_text(event.turn)
                )
                await self._deliver(answer, sequence, [], html=True)
        elif relayed.action == "relayed":
            await self._deliver(relayed, sequence, [])
        elif relayed.action == "edited":
            replacing = await self._copy_of(relayed.edit_of)
            await self._deliver(relayed, sequence, replacing)
        elif relayed.action == "deleted":
            for message in await self._copy_of(relayed.turn_id):
                await self.renderer.delete(message)
        elif isinstance(event, DeliveryEvent) and event.status == "failed":
            await self._note(relayed)

    async def _copy_of(self, turn: str) -> list[int]:
        pids = await self.renderer.while_away(
            lambda: self.out.client.delivery_get(self.thread_id, turn)
        )
        return [m for m in map(_message_of, pids) if m]

    async def _deliver(
        self, relayed: Relayed, sequence: int, replacing: list[int], *, html: bool = False
    ) -> None:
        """Show `relayed` in the chat (editing the messages of `replacing`, the copy it
        replaces, where it can; `html`: Markdown shown formatted) and report it."""
        turn = relayed.turn_id
        if await self._copy_of(turn):
            return  # delivered and reported before a restart
        pieces = split_message(relayed.shown, self.out.config.message_chars)
        parts = [p.rstrip("\n") for p in pieces if p.strip()]  # Telegram trims them anyway
        sent = await self.out.state.copy_parts(self.thread_id, turn)
        try:
            for index in range(len(sent), len(parts)):
                message = replacing[index] if index < len(replacing) else 0
                if message and await self.renderer.edit(message, parts[index], html=False):
                    await self.out.state.add_copy_part(self.thread_id, turn, index, message)
                else:
                    message = await self._post(relayed, sequence, index, parts[index], html)
                sent.append(message)
        except _Undelivered as failure:
            log.warning("copy not delivered", thread_id=self.thread_id, error=failure.detail)
            metrics.delivery_failed(self.out.name)
            await self._report(relayed, sequence, "failed", detail=failure.detail)
            return
        for extra in replacing[len(parts) :]:
            await self.renderer.delete(extra)
        assert self.renderer.place is not None
        chat = self.renderer.place.chat
        pids = [platform_id(chat, message) for message in sent]
        await self._report(relayed, sequence, "delivered", pids)
        metrics.delivered(self.out.name)

    async def _post(
        self, relayed: Relayed, sequence: int, index: int, text: str, html: bool
    ) -> int:
        """Send part `index` of a copy and record it before anything else happens."""
        place = self.renderer.place
        assert place is not None

        async def send() -> int:
            message = await self._send(text, relayed, sequence, html=html)
            await self.out.state.add_copy_part(self.thread_id, relayed.turn_id, index, message)
            await self.out.state.add_to_chain(place.chat, message, place.root)
            return message

        return await uninterrupted(send())

    async def _send(
        self, text: str, relayed: Relayed | None = None, sequence: int = 0, *, html: bool = False
    ) -> int:
        """`sendMessage` through flood control until `relay_deadline` (reported
        `retrying` once, for a copy of `relayed`); _Undelivered when Telegram refuses it
        for good or the deadline passed. HTML Telegram refuses goes as plain text."""
        api = self.out.api
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.out.config.relay_deadline
        where: dict[str, Any] = self.renderer.where()
        told = False
        while True:
            try:
                formatted = (
                    {"text": to_html(text), "parse_mode": "HTML"} if html else {"text": text}
                )
                sent = await api.call("sendMessage", patient=False, **formatted, **where)
                return int(sent["message_id"])
            except TelegramError as exc:
                if exc.code == 429:
                    if loop.time() >= deadline:
                        raise _Undelivered(f"flood control for {exc.retry_after:g} s") from None
                    if relayed is not None and not told:
                        told = True
                        await self._report(relayed, sequence, "retrying", detail=exc.description)
                    await api.limits.unpaused(where["chat_id"], "send")
                elif html and exc.says("can't parse entities"):
                    html = False
                elif exc.says("thread not found") and "message_thread_id" in where:
                    del where["message_thread_id"]
                else:
                    raise _Undelivered(f"{exc.code} {exc.description}") from None

    async def _note(self, relayed: Relayed) -> None:
        """Tell the chat that another endpoint could not show one of its messages."""
        key = f"{relayed.turn_id}:delivery:{relayed.origin}"
        if await self.out.state.copy_parts(self.thread_id, key):
            return

        async def send() -> None:
            message = await self._send(relayed.text)
            await self.out.state.add_copy_part(self.thread_id, key, 0, message)

        try:
            await uninterrupted(send())
        except _Undelivered as failure:
            log.info("delivery status not shown", thread_id=self.thread_id, error=failure.detail)

    async def _report(
        self,
        relayed: Relayed,
        sequence: int,
        status: DeliveryStatus,
        platform_ids: list[str] | None = None,
        detail: str = "",
    ) -> None:
        await self.renderer.while_away(
            lambda: self.out.client.report_delivery(
                self.thread_id,
                sequence=sequence,
                turn=relayed.turn_id,
                origin=relayed.origin,
                status=status,
                platform_ids=platform_ids or (),
                detail=detail or None,
            )
        )
