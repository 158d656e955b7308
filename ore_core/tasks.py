"""TaskScope: structured background work, so no task's crash goes unnoticed.

Every long-running service (the core, its ingress, pipeline and pullers, the
Manager's streams and sinks, a durable feed) owns its background tasks in one
`TaskScope`. The contract is `asyncio.TaskGroup`'s: a scope's tasks end before the
scope does (`aclose` cancels and waits for them), and when one of them crashes its
siblings are cancelled. What a TaskGroup cannot do here, and a scope does:

- services are started and stopped by calls (`start()`, `stop()`), and spawn work
  from synchronous callbacks (a stream's worker on its first message), so the scope
  is an object, not an `async with` block in one owner task (it can be one too);
- a crash is logged once, at once, with the task's name and traceback, and kept as
  `crash` so a health check can report it (`/readyz`) while the owner stops;
- scopes nest: a service's scope is a child of its owner's (`child`, `adopt`), so a
  crash anywhere in `ore serve` reaches the core's scope, whose `on_crash` stops it;
- the root scope's `aclose` raises `TaskCrashed`, so `stop()` reports the crash
  instead of discarding it (only the root: a parent reports its children's).

A task spawned with `critical=False` is a job, not a loop (a bridge answering one
request): its failure is logged with its name and nothing else stops.

Concurrency: one event loop; `spawn` needs a running loop, everything else may be
called before there is one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self, TypeVar

import structlog

from ore_core.errors import OreError

__all__ = ["AsyncClosing", "Crash", "Idle", "TaskCrashed", "TaskScope"]

log = structlog.get_logger("ore.tasks")

T = TypeVar("T")

_RECANCEL = 0.1  # seconds between cancels of a task that has not ended yet


@dataclass(frozen=True, slots=True)
class Crash:
    """The first task of a scope (or of its children) that ended with an exception."""

    scope: str
    task: str
    error: BaseException

    def describe(self) -> str:
        """One line for a health check: which task, and what it raised."""
        return f"task {self.task} ({self.scope}) crashed: {self.error!r}"


class TaskCrashed(OreError):
    """A background task crashed, so its service stopped (raised by the root's `aclose`)."""

    def __init__(self, crash: Crash) -> None:
        super().__init__(
            f"{crash.describe()}; the service stopped. This is a bug in ore or in a plugin: "
            "the log has the traceback (event 'background task crashed')."
        )
        self.crash = crash


class TaskScope:
    """Owns background tasks: names them, waits for them, and hears of their crash.

    `on_crash(crash)` is called once, for the first crash in this scope or in any of
    its children; it is how an owner learns that it must stop (and it must not raise).
    """

    def __init__(self, name: str, *, on_crash: Callable[[Crash], object] | None = None) -> None:
        self.name = name
        self._on_crash = on_crash
        self._parent: TaskScope | None = None
        self._children: list[TaskScope] = []
        self._tasks: dict[asyncio.Task[Any], bool] = {}  # task -> critical
        self._crash: Crash | None = None
        self._reported = False
        self._closed = False

    # -- state ------------------------------------------------------------------

    @property
    def path(self) -> str:
        """`core/ingress/puller-p0`: where the scope sits, for the log."""
        return self.name if self._parent is None else f"{self._parent.path}/{self.name}"

    @property
    def crash(self) -> Crash | None:
        """The first crash in this scope or its children, or None."""
        return self._crash

    @property
    def closed(self) -> bool:
        """True once `aclose` started: nothing more may be spawned."""
        return self._closed

    def __len__(self) -> int:
        return len(self._tasks)

    # -- structure ----------------------------------------------------------------

    def child(self, name: str, *, on_crash: Callable[[Crash], object] | None = None) -> TaskScope:
        """A new scope whose crashes also reach this one (and whose tasks it outlives)."""
        scope = TaskScope(name, on_crash=on_crash)
        self.adopt(scope)
        return scope

    def adopt(self, scope: TaskScope) -> None:
        """Make `scope` (built before its owner was, like a Manager's) a child of this one."""
        if scope._parent is not None and scope._parent is not self:
            raise RuntimeError(f"task scope {scope.path} already belongs to another scope")
        if scope._parent is self:
            return
        scope._parent = self
        self._children.append(scope)
        if scope._crash is not None:
            self._failed(scope._crash)

    # -- tasks --------------------------------------------------------------------

    def spawn(
        self, coroutine: Coroutine[Any, Any, T], *, name: str, critical: bool = True
    ) -> asyncio.Task[T]:
        """Run `coroutine` as a task of this scope, named `name` (for the log and `crash`).

        `critical=False`: a failure is logged and forgotten (one job among many).
        Raises TaskCrashed after a crash and RuntimeError once closed, so nothing
        starts in a service that is stopping.
        """
        if self._crash is not None or self._closed:
            coroutine.close()
            if self._crash is not None:
                raise TaskCrashed(self._crash)
            raise RuntimeError(f"task scope {self.path} is closed; {name} not started")
        task = asyncio.get_running_loop().create_task(coroutine, name=name)
        self._tasks[task] = critical
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[Any]) -> None:
        critical = self._tasks.pop(task, True)
        if task.cancelled():
            return
        error = task.exception()
        if error is None:
            return
        if not critical:
            log.error(
                "background job failed", scope=self.path, task=task.get_name(), exc_info=error
            )
            return
        crash = Crash(self.path, task.get_name(), error)
        if self._crash is None:
            log.error(
                "background task crashed",
                scope=crash.scope,
                task=crash.task,
                error=repr(error),
                exc_info=error,
            )
        else:  # a second one while stopping: still worth a line, not a second alarm
            log.warning("background task also failed", scope=crash.scope, task=crash.task)
        self._failed(crash)

    def _failed(self, crash: Crash) -> None:
        """Record `crash` (the first one wins), stop this scope's work, tell the owners."""
        if self._crash is not None:
            return
        self._crash = crash
        self.cancel()
        if self._on_crash is not None:
            self._on_crash(crash)
        if self._parent is not None:
            self._parent._propagated(crash)

    def _propagated(self, crash: Crash) -> None:
        # A child's crash: the owner stops its other parts in order (its on_crash says
        # how), so they are not cancelled here.
        if self._crash is not None:
            return
        self._crash = crash
        if self._on_crash is not None:
            self._on_crash(crash)
        if self._parent is not None:
            self._parent._propagated(crash)

    def cancel(self) -> None:
        """Cancel every task of this scope and of its children (they keep running `aclose`)."""
        for task in list(self._tasks):
            task.cancel()
        for child in self._children:
            child.cancel()

    async def aclose(self) -> None:
        """Cancel what still runs, wait until every task (and child scope) has ended.

        Then, in a root scope with a crash not yet reported (`raise_crash`), raise
        TaskCrashed. Idempotent.
        """
        self._closed = True
        for child in list(self._children):
            await child.aclose()
        while self._tasks:
            tasks = list(self._tasks)
            for task in tasks:
                task.cancel()
            # Cancel again until they end: on 3.11 asyncio.wait_for (nats-py's fetch
            # runs one) can swallow a cancel that races a result.
            await asyncio.wait(tasks, timeout=_RECANCEL)
        if self._parent is not None and self in self._parent._children:
            self._parent._children.remove(self)  # its crash, if any, is the parent's now
        if self._parent is None and self._crash is not None and not self._reported:
            self.raise_crash()

    def raise_crash(self) -> None:
        """Raise TaskCrashed if a task crashed (then `aclose` does not raise it again)."""
        if self._crash is not None:
            self._reported = True
            raise TaskCrashed(self._crash)

    async def __aenter__(self) -> TaskScope:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is not None and isinstance(exc, TaskCrashed) and exc.crash is self._crash:
            self._reported = True  # the body already raised it
        await self.aclose()


class Idle:
    """Wakes every task waiting for work to run out (`wait`) when its owner says it
    did (`set`); one future, shared by the waiters, made afresh after each `set`.

    Used from one event loop; a waiter cancelled by its timeout leaves the others be.
    """

    def __init__(self) -> None:
        self._future: asyncio.Future[None] | None = None

    async def wait(self) -> None:
        """Return at the next `set` (the caller checked that there is work left)."""
        if self._future is None or self._future.done():
            self._future = asyncio.get_running_loop().create_future()
        await asyncio.shield(self._future)

    def set(self) -> None:
        """The work ran out: wake the waiters."""
        future = self._future
        if future is not None and not future.done():
            future.set_result(None)


class AsyncClosing:
    """`async with` an object of a subclass to `aclose()` it on the way out, however the
    block ends (the subclass defines `aclose`)."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Release what the object holds."""
        raise NotImplementedError
