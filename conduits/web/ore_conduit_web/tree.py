"""A thread as the page shows it: every turn with its parent, the active path, siblings.

The core keeps a tree of turns and the page shows it as it is: a regenerated answer is
the core's sibling answer under the same question (`2/2` on the answer), an edit a
sibling of the message it replaces. A compacted thread's active path starts at the
summary turn (the boundary): its view carries `compaction`, which the page shows as
one collapsible line instead of a message.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pydantic import BaseModel

from ore_conduit_web.relays import DeliveryView, History, RelayView
from ore_core import Reasoning, Text, ToolCall, ToolResult, Turn
from ore_core.artifacts import Attachment
from ore_core.session.compaction import BoundaryInfo, summary_text
from ore_core.session.reactions import reactions_of
from ore_core.turn import format_timestamp

__all__ = [
    "INLINE_TYPES",
    "CompactionView",
    "FileView",
    "ThreadTree",
    "ToolStep",
    "TurnView",
    "build_tree",
    "leaf_under",
    "mark_compaction",
    "text_of",
]


INLINE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp", "image/avif"})
"""Images a browser shows in the page (no SVG: it may hold scripts)."""


class FileView(BaseModel):
    """A file of a turn as the page shows it: served at
    `/api/threads/{thread}/files/{sha256}`; `inline` when the page shows it as an image."""

    name: str
    media_type: str
    size: int
    sha256: str
    inline: bool

    @classmethod
    def of(cls, attachment: Attachment) -> FileView:
        """The view of an attachment."""
        return cls(
            name=attachment.name,
            media_type=attachment.media_type,
            size=attachment.size,
            sha256=attachment.sha256,
            inline=attachment.media_type in INLINE_TYPES,
        )


def text_of(turn: Turn) -> str:
    """The turn's text artifacts, joined by blank lines."""
    return "\n\n".join(a.content for a in turn.artifacts if isinstance(a, Text))


class ToolStep(BaseModel):
    """A tool call or its result, shown as a collapsible step."""

    kind: str
    name: str = ""
    content: str = ""
    is_error: bool = False


class CompactionView(BaseModel):
    """A compaction's summary turn: how many turns it stands for, and the summary."""

    turns: int
    """The turns the summary replaced (`/uncompact` restores them)."""
    summary: str
    """The summary the model is sent instead of them (Markdown, as the model wrote it)."""


class TurnView(BaseModel):
    """One turn as shown: `parent_id` after folding, `siblings` in the order they came.

    On a linked thread (bridging): `relay` says where the turn came from and how it is
    shown (another endpoint's message with its label; an answer the gateway's `answer`
    setting hides is `hidden` and left off the path), `deleted` marks a turn deleted on
    another endpoint (left off the path), `deliveries` what other endpoints reported
    about their copy of this page's message.
    """

    id: str
    parent_id: str
    role: str
    text: str
    reasoning: str = ""
    steps: list[ToolStep] = []
    timestamp: str = ""
    siblings: list[str] = []
    relay: RelayView | None = None
    deleted: bool = False
    deliveries: list[DeliveryView] = []
    compaction: CompactionView | None = None
    """Set on the summary turn of the thread's compaction (the start of the active path)."""
    files: list[FileView] = []
    """The turn's files (a user's, or relayed from another endpoint), in the order sent."""
    reactions: dict[str, list[str]] = {}
    """Each emoji and who reacts with it (`namespace:user`; the page's users are
    `web:NAME`), in the order they came."""


class ThreadTree(BaseModel):
    """A thread's turns (all known), its active path (oldest first) and metadata.

    `gateway`, `answer` and `label`: the thread's bridging settings (a thread without
    links: no gateway, `origin`, the default label). `model`: see the field.
    """

    id: str
    title: str
    turns: list[TurnView]
    path: list[str]
    cursor: str = ""
    gateway: str = ""
    answer: str = "origin"
    label: str = "{name} ({conduit})"
    model: str = ""
    """The model the thread chose (`ore.model.name`); empty: the processor's configured one."""


def _view(turn: Turn, parent_id: str) -> TurnView:
    steps: list[ToolStep] = []
    for artifact in turn.artifacts:
        if isinstance(artifact, ToolCall):
            steps.append(ToolStep(kind="tool_call", name=artifact.name, content=artifact.arguments))
        elif isinstance(artifact, ToolResult):
            steps.append(
                ToolStep(kind="tool_result", content=artifact.content, is_error=artifact.is_error)
            )
    return TurnView(
        id=turn.id,
        parent_id=parent_id,
        role=str(turn.role),
        text=text_of(turn),
        reasoning="\n\n".join(a.content for a in turn.artifacts if isinstance(a, Reasoning)),
        steps=steps,
        timestamp=format_timestamp(turn.timestamp) if turn.timestamp else "",
        files=[FileView.of(a) for a in turn.artifacts if isinstance(a, Attachment)],
        reactions=reactions_of(turn),
    )


def build_tree(
    thread_id: str,
    title: str,
    turns: Sequence[Turn],
    path: Sequence[Turn],
    cursor: str,
    history: History,
    reactions: Mapping[str, Mapping[str, Sequence[str]]] | None = None,
) -> ThreadTree:
    """The page's view of a thread from its known turns, its active path and what its
    stored events say about a linked thread's turns (`history`) and about the reactions
    since (`reactions`: turn -> emoji -> who reacts now, the last `reaction` event's
    word; an empty list: nobody any more)."""
    known: dict[str, Turn] = {}
    for turn in (*turns, *path):
        known.setdefault(turn.id, turn)
    children: dict[str, list[str]] = {}
    for turn in known.values():
        children.setdefault(turn.parent_id, []).append(turn.id)
    views = []
    for turn in known.values():
        view = _view(turn, turn.parent_id)
        view.siblings = children.get(view.parent_id, [])
        view.relay = history.relays.get(turn.id)
        view.deleted = turn.id in history.deleted
        view.deliveries = history.deliveries_of(turn.id)
        for emoji, people in (reactions or {}).get(turn.id, {}).items():
            if people:
                view.reactions[emoji] = list(people)
            else:
                view.reactions.pop(emoji, None)
        views.append(view)
    hidden = {v.id for v in views if v.deleted or (v.relay and v.relay.action == "hidden")}
    shown_path = [turn.id for turn in path if turn.id not in hidden]
    return ThreadTree(id=thread_id, title=title, turns=views, path=shown_path, cursor=cursor)


def mark_compaction(tree: ThreadTree, info: BoundaryInfo | None) -> None:
    """Mark the summary turn of `info` (the thread's compaction) in `tree`, if it is on
    the active path: after `/uncompact` it is not, and nothing is marked."""
    if info is None or info.summary_turn_id not in tree.path:
        return
    view = next(v for v in tree.turns if v.id == info.summary_turn_id)
    summary = view.text.removeprefix(summary_text("", info.dropped_turn_count))
    view.compaction = CompactionView(turns=info.dropped_turn_count, summary=summary)


def leaf_under(tree: ThreadTree, turn_id: str) -> str:
    """The newest leaf below `turn_id` (itself if it has no children): where a branch ends."""
    children: dict[str, list[str]] = {}
    for view in tree.turns:
        children.setdefault(view.parent_id, []).append(view.id)
    current = turn_id
    while children.get(current):
        current = children[current][-1]
    return current
