"""Rendering a linked thread: what an endpoint shows of each event (issue 29).

A linked thread's stored batches reach every linked endpoint with the same bytes, so
each conduit decides what to show. `classify` says it for one delivery: the
endpoint's own user message is never echoed; another endpoint's user message is
shown with its label (`{name} ({conduit})`, from the thread's `ore.gateway.label`);
answers to the endpoint's own messages always, others' answers only when
`ore.gateway.answer` is `all`; `turn_deleted` and `delivery` events say what to
delete or report, `reaction` events what to react. `ThreadSettings` caches those
settings per thread (fed by `threads.get` and `properties` events). `split_message`
and `degrade` fit text and edits to a platform's `Capabilities`. This module stands on
the vocabulary alone.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal

from ore_core.artifacts import Attachment
from ore_core.events import (
    DeliveryEvent,
    PropertiesEvent,
    PropertyOperation,
    ReactionEvent,
    TurnCompleteEvent,
    TurnDeletedEvent,
)
from ore_core.turn import Role, Turn, turn_text

if TYPE_CHECKING:
    from ore_core.conduit.capabilities import Capabilities
    from ore_core.conduit.feed import Delivery

__all__ = [
    "DEFAULT_LABEL",
    "GATEWAY_ANSWER_KEY",
    "GATEWAY_KEY",
    "GATEWAY_LABEL_KEY",
    "GATEWAY_REACTION_LINES_KEY",
    "Rendered",
    "RelayAction",
    "Relayed",
    "SettingsCache",
    "ThreadSettings",
    "classify",
    "degrade",
    "reaction_line",
    "split_message",
    "turn_text",
]

GATEWAY_KEY = "ore.gateway"
GATEWAY_ANSWER_KEY = "ore.gateway.answer"
GATEWAY_LABEL_KEY = "ore.gateway.label"
GATEWAY_REACTION_LINES_KEY = "ore.gateway.reaction_lines"
DEFAULT_LABEL = "{name} ({conduit})"

Answer = Literal["origin", "all", "none"]
_ANSWERS: dict[str, Answer] = {"origin": "origin", "all": "all", "none": "none"}
# Provenances that are the thread's own, not an endpoint's: their events are for everyone.
_THREAD_WIDE: frozenset[str] = frozenset(("", "app"))

RelayAction = Literal[
    "own", "relayed", "edited", "answer", "deleted", "reacted", "delivery", "settings", "hidden"
]
"""What an endpoint does with one event:

- `own`: the endpoint's own user message (or its own delete/report) coming back: never
  echo it.
- `relayed`: another endpoint's user message: show `Relayed.label` + `Relayed.text`.
- `edited`: another endpoint's edit (`Relayed.edit_of` names the turn it replaces):
  edit the copy in place where the platform can, else repost (see `degrade`).
- `answer`: render as the conduit renders its own conversation (answers, lifecycle,
  errors). For an assistant `turn_complete`, `Relayed.turn_id` and `Relayed.text` are
  the answer's turn and final text: what a conduit that shows another endpoint's
  answers as copies (final text only) posts and reports.
- `deleted`: delete the copy of `Relayed.turn_id` (or post a notice).
- `reacted`: another endpoint's reaction to `Relayed.turn_id`: show it on the message
  of that turn (or, where the gateway asks, as `Relayed.text`, a short line).
- `delivery`: another endpoint's delivery status of a turn (`Relayed.text` says it); one
  naming another `origin` than this endpoint is `hidden` (it is not this one's message).
- `settings`: a `properties` event: feed it to the `SettingsCache`.
- `hidden`: nothing to show here.
"""


@dataclass(frozen=True, slots=True)
class ThreadSettings:
    """A linked thread's rendering settings, mirrored in its metadata by the core."""

    gateway: str = ""
    answer: Answer = "origin"
    label: str = DEFAULT_LABEL
    reaction_lines: bool = False
    """A platform without reactions shows another endpoint's as a short line."""

    @classmethod
    def of_metadata(cls, metadata: Mapping[str, str]) -> ThreadSettings:
        """The settings in a thread's metadata (defaults for a thread without links)."""
        return cls().with_values(metadata)

    def with_values(self, values: Mapping[str, str | None]) -> ThreadSettings:
        """These settings with the keys of `values` set (None: deleted, the default)."""
        settings = self
        if GATEWAY_KEY in values:
            settings = replace(settings, gateway=values[GATEWAY_KEY] or "")
        if GATEWAY_ANSWER_KEY in values:
            answer = _ANSWERS.get(values[GATEWAY_ANSWER_KEY] or "", "origin")
            settings = replace(settings, answer=answer)
        if GATEWAY_LABEL_KEY in values:
            settings = replace(settings, label=values[GATEWAY_LABEL_KEY] or DEFAULT_LABEL)
        if GATEWAY_REACTION_LINES_KEY in values:
            lines = values[GATEWAY_REACTION_LINES_KEY] == "true"
            settings = replace(settings, reaction_lines=lines)
        return settings

    def apply(self, operations: Iterable[PropertyOperation]) -> ThreadSettings:
        """These settings after a `properties` event's operations."""
        return self.with_values(
            {op.key: (op.value if op.op == "set" else None) for op in operations}
        )

    def label_for(self, name: str, conduit: str) -> str:
        """The sender label: the template with `{name}` and `{conduit}` filled in.

        A template the operator got wrong (an unknown field, a stray brace) falls back
        to the default rather than hiding the message.
        """
        try:
            return self.label.format(name=name, conduit=conduit)
        except (KeyError, IndexError, ValueError):
            return DEFAULT_LABEL.format(name=name, conduit=conduit)


class SettingsCache:
    """Per-thread `ThreadSettings`: filled from `threads.get`, updated by `properties`.

    The conduit calls `load` when it first sees a thread (with the metadata of its
    `get_thread`) and `update` with every `properties` event; `get` answers the defaults
    for a thread never loaded.
    """

    def __init__(self) -> None:
        self._settings: dict[str, ThreadSettings] = {}

    def __contains__(self, thread_id: object) -> bool:
        return thread_id in self._settings

    def load(self, thread_id: str, metadata: Mapping[str, str]) -> ThreadSettings:
        settings = self._settings[thread_id] = ThreadSettings.of_metadata(metadata)
        return settings

    def update(self, thread_id: str, event: PropertiesEvent) -> ThreadSettings:
        settings = self.get(thread_id).apply(event.operations or ())
        self._settings[thread_id] = settings
        return settings

    def get(self, thread_id: str) -> ThreadSettings:
        return self._settings.get(thread_id) or ThreadSettings()

    def forget(self, thread_id: str) -> None:
        self._settings.pop(thread_id, None)


@dataclass(frozen=True, slots=True)
class Relayed:
    """What `classify` decided for one delivery, with what the endpoint needs to show it."""

    action: RelayAction
    origin: str = ""
    """The namespace the event came from (its provenance)."""
    turn_id: str = ""
    label: str = ""
    text: str = ""
    edit_of: str = ""
    reply_to: str = ""
    attachments: tuple[Attachment, ...] = ()
    """The files a relayed message carries, by reference (stored once in the files
    bucket; a conduit fetches what its platform can show)."""

    @property
    def shown(self) -> str:
        """`label: text` for a relayed message (the text alone without a label)."""
        return f"{self.label}: {self.text}" if self.label else self.text


def _sender(turn: Turn, event: TurnCompleteEvent) -> str:
    extra = dict(turn.extra)
    return extra.get("sender") or event.context.user_name or event.context.user or "someone"


def _answer(event: object, origin: str) -> Relayed:
    if isinstance(event, TurnCompleteEvent) and event.turn.role == Role.ASSISTANT:
        return Relayed("answer", origin, turn_id=event.turn.id, text=turn_text(event.turn))
    return Relayed("answer", origin)


def classify(delivery: Delivery, namespace: str, settings: ThreadSettings) -> Relayed:
    """What the endpoint of `namespace` does with `delivery` (see `RelayAction`)."""
    kind = delivery.kind
    if kind == "properties":
        return Relayed("settings")
    event = delivery.event
    context = getattr(event, "context", None)
    origin: str = context.provenance if context is not None else ""
    if origin == namespace:
        own = kind in ("delivery", "turn_deleted", "reaction") or (
            isinstance(event, TurnCompleteEvent) and event.turn.role == Role.USER
        )
        return Relayed("own", origin) if own else _answer(event, origin)
    if origin in _THREAD_WIDE:
        return _answer(event, origin)
    if isinstance(event, TurnCompleteEvent) and event.turn.role == Role.USER:
        turn = event.turn
        extra = dict(turn.extra)
        edit_of = extra.get("edit_of", "")
        return Relayed(
            "edited" if edit_of else "relayed",
            origin,
            turn_id=turn.id,
            label=settings.label_for(_sender(turn, event), origin),
            text=turn_text(turn),
            edit_of=edit_of,
            reply_to=extra.get("reply_to", ""),
            attachments=tuple(a for a in turn.artifacts if isinstance(a, Attachment)),
        )
    if isinstance(event, TurnDeletedEvent):
        return Relayed("deleted", origin, turn_id=event.turn)
    if isinstance(event, ReactionEvent):
        return Relayed("reacted", origin, turn_id=event.turn, text=reaction_line(event))
    if isinstance(event, DeliveryEvent):
        if event.origin and event.origin != namespace:
            return Relayed("hidden", origin)  # the status of another endpoint's message
        detail = f": {event.detail}" if event.detail else ""
        text = f"delivery to {event.endpoint} {event.status}{detail}"
        return Relayed("delivery", origin, turn_id=event.turn, text=text)
    if kind == "notice":
        return Relayed("hidden", origin)  # a notice is for its sender only
    return _answer(event, origin) if settings.answer == "all" else Relayed("hidden", origin)


def reaction_line(event: ReactionEvent) -> str:
    """The short line of a reaction, for a platform without reactions:
    `Ana reacted 👍 to "hello"` (`removed 👍 from` for a reaction taken back)."""
    name = event.context.user_name or event.context.user or event.context.provenance
    done = f"removed {event.emoji} from" if event.remove else f"reacted {event.emoji} to"
    return f'{name} {done} "{event.excerpt}"'


# -- fitting text to a platform ----------------------------------------------

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")


def split_message(text: str, limit: int) -> list[str]:
    """`text` in pieces of at most `limit` characters, never breaking a code fence.

    Pieces end at a line break where one fits (else mid-line). A fence open at a cut
    is closed at the end of the piece and opened again (with its info string) at the
    start of the next, so each piece renders on its own. Text within the limit is one
    piece; empty text is no piece. (Fence lines longer than a quarter of the limit are
    cut like any line.)
    """
    if limit < 16:
        raise ValueError(f"limit {limit} is too small to split a message (at least 16)")
    if len(text) <= limit:
        return [text] if text else []
    pieces: list[str] = []
    current = ""
    fence: _Fence | None = None  # the fence open at the end of `current`
    reopened = ""  # the fence line `current` was started with ("" if none)
    for line in text.splitlines(keepends=True):
        after = _after_line(fence, line)
        while True:
            if len(current) + len(line) + _closing(after) <= limit:
                current += line
                fence = after
                break
            if current != reopened:  # something to send: cut at the line break
                pieces.append(_closed(current, fence))
                current = reopened = _reopening(fence, limit)
                continue
            room = limit - len(current) - _closing(fence)  # one line longer than a piece
            current += line[:room]
            line = line[room:]
            pieces.append(_closed(current, fence))
            current = reopened = _reopening(fence, limit)
    if current != reopened:
        pieces.append(current)
    return pieces


_Fence = tuple[str, str]
"""An open code fence: its marker (three or more backticks or tildes) and info string."""


def _closing(fence: _Fence | None) -> int:
    """Room to keep for closing `fence` at a cut: a line break and the marker."""
    return 0 if fence is None else len(fence[0]) + 1


def _closed(piece: str, fence: _Fence | None) -> str:
    if fence is None:
        return piece
    return piece + ("" if piece.endswith("\n") else "\n") + fence[0]


def _reopening(fence: _Fence | None, limit: int) -> str:
    """The line that reopens `fence` in the next piece (without its info if too long)."""
    if fence is None:
        return ""
    line = f"{fence[0]}{fence[1]}\n"
    return line if len(line) + _closing(fence) <= limit // 2 else f"{fence[0]}\n"


def _after_line(fence: _Fence | None, line: str) -> _Fence | None:
    """The fence open after `line` (CommonMark: a closing fence repeats the marker)."""
    match = _FENCE.match(line.rstrip("\r\n"))
    if match is None:
        return fence
    marker, info = match.group(1), match.group(2)
    if fence is None:
        return None if marker[0] == "`" and "`" in info else (marker, info)
    if marker[0] == fence[0][0] and len(marker) >= len(fence[0]) and not info.strip():
        return None
    return fence


Rendered = tuple[Literal["edit", "post"], str]
"""How to show a relayed edit or reply: edit the copy in place, or post `text`."""


def degrade(relayed: Relayed, capabilities: Capabilities, quoted: str = "") -> Rendered:
    """Fit an edit or a reply to the platform.

    An edit where the platform edits: ("edit", shown text) for the conduit to apply to
    its copy (found with `deliveries.get`); else ("post", the text marked edited). A
    reply on a platform without threads: the replied-to text `quoted` goes first as a
    quote. Anything else: ("post", its shown text).
    """
    shown = relayed.shown
    if relayed.action == "edited":
        if capabilities.edit:
            return ("edit", shown)
        return ("post", f"{shown} (edited)")
    if relayed.reply_to and quoted and not capabilities.threads:
        quote = "\n".join(f"> {line}" for line in quoted.splitlines()) or ">"
        return ("post", f"{quote}\n{shown}")
    return ("post", shown)
