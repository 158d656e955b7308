"""Projections of a State: show the model different turns without touching the stored ones.

`View` replaces what `turns()` returns (compaction, filtering); `Prepend` puts virtual
turns (a system prompt, guardrails) before the base's live turns. Both send `append`
and `meta` to the base, so whatever the loop adds lands in the real conversation.
Use `view()` and `prepend()`: with nothing to project they return the base itself.
"""

from __future__ import annotations

from collections.abc import Iterable

from ore_core.artifacts import Artifact
from ore_core.ledger.meta import Meta
from ore_core.ledger.thread import State
from ore_core.turn import Role, Turn

__all__ = ["Prepend", "View", "prepend", "view"]


class _Delegating:
    """Sends `append` and `meta` to the base State: projections own no turns or metadata."""

    __slots__ = ("_base",)

    def __init__(self, base: State) -> None:
        self._base = base

    def append(self, role: Role | str, *artifacts: Artifact, event_id: str = "") -> Turn:
        """Append to the base State (the projection itself does not change)."""
        return self._base.append(role, *artifacts, event_id=event_id)

    def meta(self) -> Meta:
        """The base State's live metadata handle."""
        return self._base.meta()

    def base_state(self) -> State:
        """The State this projection wraps, for callers composing projections."""
        return self._base


class View(_Delegating):
    """A State whose `turns()` is a fixed list chosen by the caller (copied on the way in).

    Appended turns go to the base and do not appear in this view's `turns()`.
    """

    __slots__ = ("_turns",)

    def __init__(self, base: State, turns: Iterable[Turn]) -> None:
        super().__init__(base)
        self._turns = list(turns)

    def turns(self) -> list[Turn]:
        """Copies of the projected turns."""
        return list(self._turns)


class Prepend(_Delegating):
    """A State whose `turns()` is the virtual turns followed by the base's turns *now*.

    The base is read on every call, so turns appended after the projection was made
    show up too.
    """

    __slots__ = ("_virtual",)

    def __init__(self, base: State, virtual: Iterable[Turn]) -> None:
        super().__init__(base)
        self._virtual = list(virtual)

    def turns(self) -> list[Turn]:
        """Copies of the virtual turns, then the base's current turns."""
        return self.virtual_turns() + self._base.turns()

    def virtual_turns(self) -> list[Turn]:
        """Copies of the turns placed before the base's."""
        return list(self._virtual)


def view(base: State, turns: Iterable[Turn] | None) -> State:
    """`View(base, turns)`, or `base` itself when `turns` is empty or None."""
    projected = list(turns or ())
    return View(base, projected) if projected else base


def prepend(base: State, virtual: Iterable[Turn] | None) -> State:
    """`Prepend(base, virtual)`, or `base` itself when `virtual` is empty or None."""
    extra = list(virtual or ())
    return Prepend(base, extra) if extra else base
