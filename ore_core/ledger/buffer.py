"""Buffer: the simplest State, a plain list of turns with no branches and no journal."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ore_core.artifacts import Artifact
from ore_core.ledger.clock import Clock, SystemClock
from ore_core.ledger.meta import Meta
from ore_core.turn import Role, Turn, generate_turn_id

__all__ = ["Buffer"]


class Buffer:
    """A linear conversation: `turns()` is everything appended, in order.

    For ephemeral work (a one-shot agent, a summary prompt) where a tree and a journal
    would be overhead. Appended turns get an id, the previous turn as parent and the
    clock's time, so a Buffer's turns load into a Thread as one chain. Turns going in
    and out are copies.

    Not thread-safe: one asyncio task owns a Buffer.
    """

    __slots__ = ("_clock", "_meta", "_turns")

    def __init__(
        self, *, clock: Clock | None = None, metadata: Mapping[str, str] | None = None
    ) -> None:
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._turns: list[Turn] = []
        self._meta = Meta(dict(metadata or {}))

    def __len__(self) -> int:
        """Number of turns."""
        return len(self._turns)

    def turns(self) -> list[Turn]:
        """Copies of every turn, oldest first."""
        return list(self._turns)

    def append(self, role: Role | str, *artifacts: Artifact, event_id: str = "") -> Turn:
        """Add a turn stamped with the clock's time; returns it."""
        parent_id = self._turns[-1].id if self._turns else ""
        turn = Turn(
            generate_turn_id(),
            role,
            artifacts,
            parent_id=parent_id,
            timestamp=self._clock.now(),
            event_id=event_id,
        )
        self._turns.append(turn)
        return turn

    def load_turns(self, turns: Iterable[Turn]) -> None:
        """Replace every turn with copies of `turns`, kept as they are (timestamps too).

        For restoring saved turns, which `append` would re-stamp with the current time.
        """
        self._turns = list(turns)

    def meta(self) -> Meta:
        """The live metadata handle (every call shares the same storage)."""
        return self._meta
