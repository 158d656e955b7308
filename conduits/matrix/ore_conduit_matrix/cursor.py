"""SyncCursor: the sync token stored only once the core acknowledged what came before.

Each `/sync` answer is a batch: its events and the `next_batch` token after them. The
engine confirms events one by one (`Inbound.done`), in any order across conversations.
A batch's token is stored once every event of it, and of every batch before it, is
confirmed: a conduit killed at any moment syncs again from a token whose events the
core has all stored, and gets the rest again (the core stores each event id once).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

__all__ = ["Batch", "SyncCursor"]


@dataclass
class Batch:
    """One sync answer's token and how many of its events are not confirmed yet."""

    token: str
    pending: int = 0
    sealed: bool = False  # every event of it has been handed out


class SyncCursor:
    """See the module docstring. `keep(token)` stores a token."""

    def __init__(self, keep: Callable[[str], None]) -> None:
        self._keep = keep
        self._batches: deque[Batch] = deque()

    def begin(self, token: str) -> Batch:
        batch = Batch(token)
        self._batches.append(batch)
        return batch

    def hand_out(self, batch: Batch) -> Callable[[], Awaitable[None]]:
        """A `done` for one more event of `batch`: each may be called once."""
        batch.pending += 1
        called = False

        async def done() -> None:
            nonlocal called
            if not called:
                called = True
                batch.pending -= 1
                self._advance()

        return done

    def seal(self, batch: Batch) -> None:
        """Every event of `batch` is handed out."""
        batch.sealed = True
        self._advance()

    def _advance(self) -> None:
        confirmed = None
        while self._batches and self._batches[0].sealed and self._batches[0].pending == 0:
            confirmed = self._batches.popleft()
        if confirmed is not None:
            self._keep(confirmed.token)
