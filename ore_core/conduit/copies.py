"""The relayed-copy engine: another endpoint's messages on a linked thread, on this platform.

A message written on another endpoint of a linked thread is posted here with its label
(`Ana (slack): hello`), split into parts at the platform's `max_message_length`
without breaking code fences; each part is posted with its key (`part_key(turn,
part)`) and the copy is reported to the core (`deliveries.report`) with the platform
ids, so an edit on the other endpoint edits the parts in place (posting or deleting
the difference when the part count changed) and a delete deletes them, after any
restart. A reaction on the other endpoint is made by the bot on the copy's first part
(or on this endpoint's own message of the turn) and taken back once nobody elsewhere
reacts with that emoji; a platform without reactions shows it as a short line, only
where the gateway asks for it (`ore.gateway.reaction_lines`).

What a copy may meet on the platform is the adapter's classification: a rate limit is
waited out for that conversation only and reported `retrying` (reason `rate_limited`)
once; an outage is tried again until the copy's deadline, then reported `failed`
(reason `platform_unavailable`); a refusal is reported `failed` with its reason at
once. Either way the next copy goes on.

A file the platform cannot take is shown as a link or a line naming it
(`ore_core.conduit.file_fit`); the others go to the adapter on the copy's last part.

A copy already reported is never posted again. How a post repeated after a crash is
recognised is the platform's `idempotency`: "key" (the platform drops a repeated key),
"read_back" (the adapter finds what the key posted), "none" (the copy is claimed,
reported `sending` with its keys, before it is posted; a claim found from a killed run
is posted again with `Part.repeat` set, for the platform to mark).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

import structlog

from ore_core.conduit.capabilities import Capabilities
from ore_core.conduit.client import ConduitClient
from ore_core.conduit.counters import metrics
from ore_core.conduit.file_fit import fit_files
from ore_core.conduit.pacing import Pacing
from ore_core.conduit.platform import (
    FailureReason,
    Part,
    Platform,
    PlatformError,
    RateLimited,
    Reacts,
    ReadsBack,
    Sender,
    part_key,
)
from ore_core.conduit.posted import Posted
from ore_core.conduit.relay import Relayed, degrade, split_message
from ore_core.conduit.waiting import until_answered
from ore_core.errors import ApiError
from ore_core.events import ReactionEvent, ReportStatus

__all__ = ["COPY_DEADLINE", "Copies", "Copy"]

log = structlog.get_logger("ore.conduit.copies")

_T = TypeVar("_T")

COPY_DEADLINE = 300.0
"""Seconds a copy is tried (rate limits, outages) before it is reported failed."""


@dataclass(frozen=True, slots=True)
class Copy:
    """One copy to show: what `classify` said of a stored delivery, where."""

    thread_id: str
    conversation: str
    sequence: int
    relayed: Relayed


class _Failed(Exception):
    """A copy that cannot be delivered: reported failed with `reason`."""

    def __init__(self, detail: str, reason: FailureReason) -> None:
        super().__init__(detail)
        self.detail = detail
        self.reason = reason


class Copies:
    """Posts, edits and deletes the relayed copies of one conduit (module docstring)."""

    def __init__(
        self,
        name: str,
        client: ConduitClient,
        platform: Platform,
        capabilities: Capabilities,
        pacing: Pacing,
        *,
        deadline: float = COPY_DEADLINE,
        posted: Posted | None = None,
    ) -> None:
        self.name = name
        self.client = client
        self.platform = platform
        self.capabilities = capabilities
        self.pacing = pacing
        self.deadline = deadline
        self.posted = posted  # where each part posted is noted (None: nowhere)
        self._told: set[Copy] = set()  # copies reported `retrying`, until their outcome

    async def show(self, copy: Copy) -> None:
        """Post, edit or delete what `copy.relayed` says."""
        relayed = copy.relayed
        if relayed.action in ("relayed", "answer"):
            await self._deliver(copy, relayed.shown, replacing=())
        elif relayed.action == "edited":
            action, text = degrade(relayed, self.capabilities)
            replacing = await self.platform_ids(copy.thread_id, relayed.edit_of)
            await self._deliver(copy, text, replacing if action == "edit" else ())
        elif relayed.action == "deleted" and self.capabilities.delete:
            for platform_id in await self.platform_ids(copy.thread_id, relayed.turn_id):
                await self._call(copy, partial(self._delete, copy, platform_id))
        elif relayed.action == "deleted":  # a platform that cannot delete says so
            text = f"a message from {relayed.origin} was deleted"
            notice = Part(text, kind="notice", severity="info")
            key = part_key(f"{copy.thread_id}.{relayed.turn_id}.deleted", 0)
            await self._call(copy, partial(self.platform.post, copy.conversation, notice, key))

    async def react(self, copy: Copy, event: ReactionEvent, *, lines: bool) -> None:
        """Show another endpoint's reaction (see the module docstring); `lines`: the
        gateway asks for a short line where the platform has no reactions."""
        platform, conversation = self.platform, copy.conversation
        if self.capabilities.reactions and isinstance(platform, Reacts):
            elsewhere = [r for r in event.reactors if r.partition(":")[0] != self.name]
            if event.remove and elsewhere:
                return  # someone elsewhere still reacts with it: it stays
            ids = await self.platform_ids(copy.thread_id, event.turn)
            target = ids[0] if ids else event.message
            if target:
                react = partial(platform.react, conversation, target, event.emoji, bool(elsewhere))
                await self._paced(copy, react)
        elif lines:
            line = Part(copy.relayed.text, kind="notice", severity="info")
            key = part_key(f"{copy.thread_id}.{event.turn}.reaction.{copy.sequence}", 0)
            await self._paced(copy, partial(platform.post, conversation, line, key))

    async def _paced(self, copy: Copy, call: Callable[[], Awaitable[object]]) -> None:
        """`call()` paced for the copy's conversation; a failure is logged (a reaction
        is no copy: nothing to report)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.deadline
        try:
            await self.pacing.call(copy.conversation, call, deadline=deadline)
        except PlatformError as exc:
            log.warning("reaction not shown", thread_id=copy.thread_id, error=exc.detail)

    async def platform_ids(self, thread_id: str, turn: str) -> list[str]:
        """The platform ids of the copy of `turn` reported before (none: not shown)."""
        try:
            return await until_answered(
                lambda: self.client.delivery_get(thread_id, turn),
                "the core did not answer",
                thread_id=thread_id,
            )
        except ApiError:
            return []

    async def _delete(self, copy: Copy, platform_id: str) -> None:
        await self.platform.delete(copy.conversation, platform_id)

    async def _deliver(self, copy: Copy, text: str, replacing: Sequence[str]) -> None:
        relayed = copy.relayed
        text, files = await fit_files(
            self.client, self.capabilities, copy.thread_id, text, relayed.attachments
        )
        parts = [p for p in split_message(text, self.capabilities.max_message_length) if p]
        if files and not parts:
            parts = [""]  # files without a word still need a message to carry them
        repeat = False
        if self.capabilities.idempotency == "none":
            keys = [self._key(copy, i) for i in range(len(parts))]
            try:
                claim = await self._report(copy, "sending", keys)
            except ApiError as exc:  # the thread was deleted or unlinked since
                log.info("copy not sent", thread_id=copy.thread_id, error=str(exc))
                return
            if not claim["recorded"] and claim["status"] == "delivered":
                return  # posted and reported before a restart
            repeat = not claim["recorded"]
        elif await self.platform_ids(copy.thread_id, relayed.turn_id):
            return  # posted and reported before a restart
        sender = Sender(relayed.label) if relayed.label else None
        try:
            last = len(parts) - 1
            ids = []
            for index, text in enumerate(parts):
                carried = files if index == last else ()
                part = Part(text, sender=sender, repeat=repeat, attachments=carried)
                ids.append(await self._part(copy, index, part, replacing))
            for extra in replacing[len(parts) :]:
                await self._call(copy, partial(self._delete, copy, extra))
        except _Failed as failure:
            log.warning("copy not delivered", thread_id=copy.thread_id, error=failure.detail)
            metrics.delivery_failed(self.name)
            await self._report(copy, "failed", detail=failure.detail, reason=failure.reason)
            self._told.discard(copy)
            return
        await self._report(copy, "delivered", ids)
        metrics.delivered(self.name)
        self._told.discard(copy)

    def _key(self, copy: Copy, index: int) -> str:
        return part_key(f"{copy.thread_id}.{copy.relayed.turn_id}", index)

    async def _part(self, copy: Copy, index: int, part: Part, replacing: Sequence[str]) -> str:
        """Show part `index`: edit the part it replaces in place, else post it."""
        conversation = copy.conversation
        if index < len(replacing):
            existing = replacing[index]
            await self._call(copy, lambda: self.platform.edit(conversation, existing, part))
            return existing
        posted = await self._post(copy, part, self._key(copy, index))
        if self.posted is not None:
            self.posted.add(posted, copy.thread_id, Posted.turn(copy.relayed.turn_id))
        return posted

    async def _post(self, copy: Copy, part: Part, key: str) -> str:
        conversation = copy.conversation
        if isinstance(self.platform, ReadsBack) and self.capabilities.idempotency == "read_back":
            found = await self._call(copy, lambda: _find(self.platform, conversation, key))
            if found:
                return found
        return await self._call(copy, lambda: self.platform.post(conversation, part, key))

    async def _call(self, copy: Copy, call: Callable[[], Awaitable[_T]]) -> _T:
        """`call()` paced for the copy's conversation (its first rate limit reported
        `retrying`); `_Failed` when it cannot be done."""

        async def limited(error: RateLimited) -> None:
            if copy not in self._told:
                self._told.add(copy)
                await self._report(copy, "retrying", detail=error.detail, reason=error.reason)

        loop = asyncio.get_running_loop()
        try:
            return await self.pacing.call(
                copy.conversation, call, deadline=loop.time() + self.deadline, on_limited=limited
            )
        except PlatformError as exc:
            raise _Failed(exc.detail, exc.reason) from exc

    async def _report(
        self,
        copy: Copy,
        status: ReportStatus,
        platform_ids: Sequence[str] = (),
        *,
        detail: str = "",
        reason: FailureReason | None = None,
    ) -> dict[str, Any]:
        relayed = copy.relayed
        return await until_answered(
            lambda: self.client.report_delivery(
                copy.thread_id,
                sequence=copy.sequence,
                turn=relayed.turn_id,
                origin=relayed.origin,
                status=status,
                platform_ids=platform_ids,
                detail=detail or None,
                reason=reason,
            ),
            "the core did not answer",
            thread_id=copy.thread_id,
        )


async def _find(platform: Platform, conversation: str, key: str) -> str | None:
    assert isinstance(platform, ReadsBack)
    return await platform.find(conversation, key)
