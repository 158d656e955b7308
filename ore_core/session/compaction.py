"""Compaction in the ledger: which turns a summary replaces, and the branch that holds it.

Non-destructive: the thread keeps every turn. Compacting stores a new branch beside
the old one: a system turn holding the summary (marked as the boundary, so the
active path stops there), then copies of the turns kept verbatim (the thread's own
system turns, the first exchange when pinned, the last turns). The old tip stays in
the thread, so `uncompact` only moves the tip back (copying what was said since).
`BoundaryInfo`, under the metadata key `ore.compaction.boundary.info`, records both
tips and what was dropped.

Token counts: the model's own (`Usage` of the latest answer on the path that is not a
copy, which counts the whole request it answered) where known, plus an estimate for
the turns after it: the JSON bytes of a turn's artifacts / 4, plus 4 tokens a turn.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from pydantic import BaseModel, ConfigDict, ValidationError

from ore_core.artifacts import Text, ToolCall, Usage
from ore_core.errors import OreError
from ore_core.jsonutil import dumps
from ore_core.ledger.thread import Thread
from ore_core.turn import Role, Turn

BOUNDARY_INFO_KEY = "ore.compaction.boundary.info"
"""Metadata key of the compaction boundary's `BoundaryInfo` (what was summarised)."""

__all__ = [
    "BYTES_PER_TOKEN",
    "COPY_OF",
    "SUMMARY_MARK",
    "BoundaryInfo",
    "Cut",
    "boundary_info",
    "estimate_tokens",
    "path_tokens",
    "plan_cut",
    "store_compaction",
    "summary_text",
    "uncompact",
]

SUMMARY_MARK = ("compaction", "summary")
"""`Turn.extra` pair of a summary turn."""

COPY_OF = "copy_of"
"""`Turn.extra` key of a turn copied verbatim past a boundary: the id of the original."""

BYTES_PER_TOKEN = 4
"""The estimate where the model gave no count: JSON bytes per token."""

TURN_OVERHEAD = 4
"""Tokens a message costs beside its content (role, framing)."""


class BoundaryInfo(BaseModel):
    """What a compaction did, stored as JSON in the thread metadata."""

    model_config = ConfigDict(frozen=True)

    compacted_through: int
    """Turns of the active path before the new branch's verbatim copies."""
    dropped_turn_count: int
    """Turns the summary replaced."""
    dropped_token_estimate: int
    summary_token_estimate: int = 0
    strategy: str = "summarize"
    model: str = ""
    created_at: datetime
    summary_turn_id: str = ""
    previous_tip: str = ""
    """The tip before compacting: `/uncompact` goes back there."""
    tip: str = ""
    """The tip right after compacting (the last verbatim copy)."""

    def encode(self) -> str:
        """The metadata value."""
        return self.model_dump_json(exclude_defaults=False)

    @classmethod
    def decode(cls, text: str | None) -> BoundaryInfo | None:
        """The info in `text`; None for none. Raises OreError for a damaged value."""
        if not text:
            return None
        try:
            return cls.model_validate_json(text)
        except ValidationError as exc:
            raise OreError(f"decode boundary info: {exc.errors()[0]['msg']}") from exc


def boundary_info(thread: Thread) -> BoundaryInfo | None:
    """The thread's latest compaction, if its summary is on the active path."""
    info = BoundaryInfo.decode(thread.meta().get(BOUNDARY_INFO_KEY))
    if info is None or not any(turn.id == info.summary_turn_id for turn in thread.turns()):
        return None
    return info


def estimate_tokens(turns: Sequence[Turn]) -> int:
    """The documented estimate: the JSON bytes of the turns' artifacts / 4, plus 4 a turn."""
    size = sum(len(dumps(artifact.to_dict())) for turn in turns for artifact in turn.artifacts)
    return size // BYTES_PER_TOKEN + TURN_OVERHEAD * len(turns)


def path_tokens(turns: Sequence[Turn]) -> int:
    """Tokens of a request made of `turns`: the model's count where known, else estimated."""
    for index in range(len(turns) - 1, -1, -1):
        turn = turns[index]
        if turn.role != Role.ASSISTANT or _is_copy(turn):
            continue
        usage = next((a for a in turn.artifacts if isinstance(a, Usage)), None)
        if usage is not None:
            return (
                usage.prompt_tokens + usage.completion_tokens + estimate_tokens(turns[index + 1 :])
            )
    return estimate_tokens(turns)


@dataclass(frozen=True, slots=True)
class Cut:
    """An active path split for compacting: `kept` + `older` (summarised) + `tail`."""

    kept: list[Turn]
    """The thread's system turns and the pinned first exchange: copied verbatim."""
    older: list[Turn]
    tail: list[Turn]


def plan_cut(path: Sequence[Turn], *, keep_last: int, pin_first: bool) -> Cut | None:
    """Where to cut `path`; None when nothing would be summarised.

    The tail never starts with a tool result (a call and its results stay together),
    a previous summary is summarised again, and the pinned first exchange runs from the
    first user turn to the first answer that asks for no tools.
    """
    kept: list[Turn] = []
    start = 0
    while start < len(path) and path[start].role == Role.SYSTEM:
        if not _is_summary(path[start]):
            kept.append(path[start])
        start += 1
    summaries = [turn for turn in path[:start] if _is_summary(turn)]
    if pin_first:  # after a compaction the pinned copies follow the summary: pinned again
        end = _first_exchange_end(path, start)
        kept += path[start:end]
        start = end
    cut = max(start, len(path) - keep_last)
    while start < cut < len(path) and path[cut].role == Role.TOOL:
        cut -= 1  # a tool result stays with the answer that called the tool
    if cut == start:
        return None
    older = summaries + list(path[start:cut])
    return Cut(kept, older, list(path[cut:]))


def summary_text(summary: str, dropped: int) -> str:
    """The text of the summary turn (the model reads it as the start of the thread)."""
    return f"Summary of the earlier conversation ({dropped} turns):\n\n{summary}"


def store_compaction(
    thread: Thread, cut: Cut, summary: str, *, model: str, dropped_tokens: int
) -> tuple[Turn, BoundaryInfo]:
    """Store the compacted branch (summary, then verbatim copies) and make it the tip.

    Returns the summary turn and the info; the caller marks the boundary with them.
    """
    previous_tip = thread.current_tip
    thread.fork(cut.older[-1].id)  # the summary sits beside the turns it replaces
    turn = thread.append(
        Role.SYSTEM, Text(summary_text(summary, len(cut.older))), extra=(SUMMARY_MARK,)
    )
    for kept in (*cut.kept, *cut.tail):
        _copy(thread, kept)
    info = BoundaryInfo(
        compacted_through=len(cut.kept) + len(cut.older),
        dropped_turn_count=len(cut.older),
        dropped_token_estimate=dropped_tokens,
        summary_token_estimate=estimate_tokens([turn]),
        model=model,
        created_at=datetime.now(UTC),
        summary_turn_id=turn.id,
        previous_tip=previous_tip,
        tip=thread.current_tip,
    )
    return turn, info


def uncompact(thread: Thread) -> BoundaryInfo | None:
    """Move the active path back to the uncompacted branch; None when there is none.

    Turns said since the compaction are copied onto that branch, so nothing is lost.
    """
    info = boundary_info(thread)
    if info is None:
        return None
    path = thread.turns()
    since = next((i + 1 for i, turn in enumerate(path) if turn.id == info.tip), len(path))
    thread.set_current_tip(info.previous_tip)
    for turn in path[since:]:
        _copy(thread, turn)
    thread.meta().delete(BOUNDARY_INFO_KEY)
    return info


def _copy(thread: Thread, turn: Turn) -> Turn:
    original = dict(turn.extra).get(COPY_OF, turn.id)
    extra = (*(pair for pair in turn.extra if pair[0] != COPY_OF), (COPY_OF, original))
    return thread.append(turn.role, *turn.artifacts, event_id=turn.event_id, extra=extra)


def _is_summary(turn: Turn) -> bool:
    return SUMMARY_MARK in turn.extra


def _is_copy(turn: Turn) -> bool:
    return any(key == COPY_OF for key, _ in turn.extra)


def _calls(turn: Turn) -> bool:
    return any(isinstance(artifact, ToolCall) for artifact in turn.artifacts)


def _first_exchange_end(path: Sequence[Turn], start: int) -> int:
    """The index after the first answer without tool calls (start when none)."""
    for index in range(start, len(path)):
        turn = path[index]
        if turn.role == Role.ASSISTANT and not _calls(turn):
            return index + 1
    return start
