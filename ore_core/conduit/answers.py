"""AnswerRecord: the answer a conduit rendered last in a thread, kept across restarts.

A durable feed delivers again what a conduit had not confirmed when it stopped (its
cursor lags behind what it rendered), so a restarted conduit sees events of answers it
had shown, and of the one it was writing when it died. Per thread it keeps one record
(in the thread's metadata, or a state file of its own): the trace of the answer it
rendered last, that answer's platform messages, whether it was finished, and `upto`,
the stored sequence up to which every answer of the thread was shown (a thread's
answers render in order, one at a time). `judge` tells, from the record, whether an
answer seen again was shown, was being written, or is new.

`PartClaims` is the engine's record for a platform without idempotency keys: one
claim per posted part (see the class).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ore_core.conduit.client import ConduitClient
from ore_core.conduit.waiting import until_answered
from ore_core.events import ReportStatus

__all__ = ["AnswerRecord", "Claim", "PartClaims", "Verdict"]

Verdict = Literal["shown", "resume", "new"]
"""What a record says of an answer: `shown` (skip it: shown before), `resume` (the
answer the record names, unfinished: adopt its messages), `new` (render it)."""

_KEYS = ("trace", "messages", "final", "upto")


@dataclass(frozen=True, slots=True)
class AnswerRecord:
    """The record of one thread (see the module docstring). `extra` keeps what else a
    conduit needs to resume an answer (Slack: whether it streams natively)."""

    trace: str = ""
    messages: tuple[Any, ...] = ()
    final: bool = False
    upto: int = 0
    extra: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def of(
        cls,
        trace: str,
        messages: Sequence[Any],
        *,
        final: bool,
        sequence: int,
        after: int,
        **extra: Any,
    ) -> AnswerRecord:
        """The record of the answer `trace` being written (or `final`: finished) with
        `messages`. `after` is the thread's `upto` when the answer began; `sequence` the
        answer's last stored batch, which becomes `upto` once it is finished."""
        upto = (sequence or after) if final else after
        return cls(trace, tuple(messages), final, upto, extra)

    @classmethod
    def loads(cls, text: str | None) -> AnswerRecord:
        """The record in `text` (JSON); an empty record for none or a damaged one."""
        try:
            data = json.loads(text or "{}")
            if not isinstance(data, dict):
                return cls()
            return cls(
                str(data.get("trace") or ""),
                tuple(data.get("messages") or ()),
                bool(data.get("final")),
                int(data.get("upto") or 0),
                {k: v for k, v in data.items() if k not in _KEYS},
            )
        except (ValueError, TypeError):
            return cls()

    def dumps(self) -> str:
        """The record as compact JSON."""
        data = {**self.extra, "trace": self.trace, "messages": list(self.messages)}
        data.update(final=self.final, upto=self.upto)
        return json.dumps(data, separators=(",", ":"))

    def judge(self, trace: str, sequence: int | None) -> Verdict:
        """What the record says of the answer `trace`, first seen in stored batch
        `sequence` (None: in a live event)."""
        if trace != self.trace:
            return "shown" if sequence is not None and sequence <= self.upto else "new"
        return "shown" if self.final else "resume"


@dataclass(frozen=True, slots=True)
class Claim:
    """What the record says of one part about to be posted: `platform_id` when an
    earlier run posted and recorded it (adopt it), else whether an earlier run claimed
    it and was stopped before it could record the outcome (`unsure`: it may be out)."""

    platform_id: str = ""
    unsure: bool = False


class PartClaims:
    """The answer record of a platform without idempotency keys, part by part, kept where
    the copies' claims are (the core's delivery map of the conduit's namespace): each
    part's key is claimed before it is posted and its platform id recorded after, so a
    run restarted after a kill -9 adopts what was recorded and knows which one post it
    cannot be sure of (the one under way at the kill)."""

    def __init__(self, client: ConduitClient) -> None:
        self.client = client

    async def claim(self, thread_id: str, key: str) -> Claim:
        """Claim the part `key` of an answer in `thread_id` (see the class docstring)."""
        reply = await self._report(thread_id, key, "sending")
        if reply["recorded"]:
            return Claim()
        if reply.get("status") == "delivered" and reply.get("platform_ids"):
            return Claim(str(reply["platform_ids"][0]))
        return Claim(unsure=True)

    async def record(self, thread_id: str, key: str, platform_id: str) -> None:
        """The part `key` is posted as `platform_id`."""
        await self._report(thread_id, key, "delivered", (platform_id,))

    async def _report(
        self, thread_id: str, key: str, status: ReportStatus, ids: Sequence[str] = ()
    ) -> dict[str, Any]:
        return await until_answered(
            lambda: self.client.report_delivery(
                thread_id, sequence=0, turn=key, status=status, platform_ids=ids
            ),
            "the core did not answer",
            thread_id=thread_id,
        )
