"""AnswerRecord: the answer a conduit rendered last in a thread, kept across restarts.

A durable feed delivers again what a conduit had not confirmed when it stopped (its
cursor lags behind what it rendered), so a restarted conduit sees events of answers it
had shown, and of the one it was writing when it died. Per thread it keeps one record
(in the thread's metadata, or a state file of its own): the trace of the answer it
rendered last, that answer's platform messages, whether it was finished, and `upto`,
the stored sequence up to which every answer of the thread was shown (a thread's
answers render in order, one at a time). `judge` tells, from the record, whether an
answer seen again was shown, was being written, or is new.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["AnswerRecord", "Verdict"]

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
