"""Who hears that a JetStream limit holds a `Pipeline`'s messages back, and that it freed:
the core tells the users, fails /readyz and holds its ingress acks."""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable

from ore_core.tasks import TaskCrashed, TaskScope

__all__ = ["LimitListeners", "LimitReached"]

LimitReached = Callable[[str, str], Awaitable[None]]
"""`await on_limit(subject, reason)`: a message to `subject` is held by a JetStream limit."""


class LimitListeners:
    """The `reached` and `cleared` listeners of one pipeline, and the notices not yet told."""

    __slots__ = ("_cleared", "_notices", "_reached", "_tasks")

    def __init__(self, tasks: TaskScope) -> None:
        self._tasks = tasks
        self._reached: list[LimitReached] = []
        self._cleared: list[Callable[[], None]] = []
        self._notices: deque[tuple[str, str]] = deque()  # for the `reached` listeners

    def watch(
        self, reached: LimitReached | None = None, cleared: Callable[[], None] | None = None
    ) -> None:
        """Call `reached(subject, reason)` for each held message, `cleared()` once all went."""
        if reached is not None:
            self._reached.append(reached)
        if cleared is not None:
            self._cleared.append(cleared)

    def held(self, subject: str, reason: str) -> None:
        """A message to `subject` is held: the `reached` listeners are awaited by a job of
        their own, in order (this runs in the connection's read loop, which must not wait)."""
        if not self._reached:
            return
        notices = self._notices
        notices.append((subject, reason))
        if len(notices) == 1:  # else the job telling the earlier ones tells this too
            try:
                self._tasks.spawn(self._tell(), name="ore-pipeline-limit", critical=False)
            except (RuntimeError, TaskCrashed):  # stopping: nobody is told any more
                notices.clear()

    def clear(self) -> None:
        """No message is held any more."""
        for cleared in self._cleared:
            cleared()

    async def _tell(self) -> None:
        """Call the `reached` listeners for each held message, oldest first."""
        notices = self._notices
        try:
            while notices:
                subject, reason = notices[0]
                for listener in self._reached:
                    await listener(subject, reason)
                notices.popleft()
        finally:
            notices.clear()  # a failure is logged (a job); later holds start a new one
