"""Waiting out what passes with time: the one retry policy of every conduit.

A conduit waits while the core or NATS is away (a restart, a deploy, a worker taking
over) and gives up at once on a refusal. Every such wait goes through
`until_answered`, so the schedule (pauses doubling from `RETRY_FIRST` to `RETRY_MAX`),
what counts as passing (`core_away`), the deadline and the log (one line per outage,
not one per try) are the same in every conduit. A conduit whose work also waits for its
platform passes a wider `passing` (its own classification of the platform's errors), and
`asked` for the wait a failure names (a rate limit's `retry_after`). A connection that
is a stream (a gateway's websocket) is connected again on the same schedule by
`across_reconnects`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Literal, TypeVar

import structlog

from ore_core.errors import ApiError, BusError, PermissionDenied

__all__ = ["RETRY_FIRST", "RETRY_MAX", "across_reconnects", "core_away", "until_answered"]

log = structlog.get_logger("ore.conduit")

RETRY_FIRST = 0.05
"""Seconds before the first try again."""
RETRY_MAX = 2.0
"""Seconds between two tries at most: a core back after a restart is found within it,
while a core that is down costs a refused request every two seconds."""

_T = TypeVar("_T")


def core_away(error: BaseException) -> bool:
    """Does `error` pass with time? NATS or the core away (a `BusError`) or the core
    failing (an `ApiError` 5xx) do; a refusal (`PermissionDenied`, any other `ApiError`)
    and every other error do not."""
    if isinstance(error, PermissionDenied):
        return False
    if isinstance(error, ApiError):
        return error.status >= 500
    return isinstance(error, BusError)


async def until_answered(
    call: Callable[[], Awaitable[_T]],
    purpose: str,
    *,
    passing: Callable[[BaseException], bool] = core_away,
    deadline: float | None = None,
    stopped: Callable[[], bool] | None = None,
    asked: Callable[[BaseException], float | None] | None = None,
    level: Literal["info", "warning"] = "warning",
    **context: Any,
) -> _T:
    """`call()`, tried again while its failure is `passing`, until it succeeds.

    The failure is raised as it is when it does not pass, when `stopped()` says the
    caller is closing, or when the next try would start after `deadline` (a time of
    the running loop's clock: the caller's own promise to whoever waits on it). The
    first failure of an outage is logged once, with `purpose` ("catch-up waits for the
    core") and `context` (the thread id...). `asked(failure)`, when it names a wait (a
    rate limit's), is waited instead of the schedule's next pause.
    """
    loop = asyncio.get_running_loop()
    pause = RETRY_FIRST
    told = False
    while True:
        try:
            return await call()
        except Exception as exc:
            if not passing(exc) or (stopped is not None and stopped()):
                raise
            wait = asked(exc) if asked is not None else None
            if deadline is not None and loop.time() + (wait or pause) > deadline:
                raise
            if not told:
                getattr(log, level)(f"{purpose}: waiting", error=str(exc), **context)
                told = True
        if wait is not None:
            await asyncio.sleep(wait)
            continue
        await asyncio.sleep(pause)
        pause = min(pause * 2, RETRY_MAX)


async def across_reconnects(
    connection: Callable[[], AsyncIterator[_T]],
    purpose: str,
    *,
    passing: Callable[[BaseException], bool],
    level: Literal["info", "warning"] = "info",
    **context: Any,
) -> AsyncIterator[_T]:
    """The items of `connection()`, connected again whenever it ends or fails with a
    `passing` error (another error is raised as it is), after the pauses of
    `until_answered`'s schedule: they start over once a connection yields an item.
    Logged once per outage, with `purpose` and `context`."""
    pause = RETRY_FIRST
    told = False
    while True:
        try:
            async for item in connection():
                pause, told = RETRY_FIRST, False
                yield item
            ended = "the connection ended"
        except Exception as exc:
            if not passing(exc):
                raise
            ended = str(exc) or type(exc).__name__
        if not told:
            getattr(log, level)(f"{purpose}: reconnecting", error=ended, **context)
            told = True
        await asyncio.sleep(pause)
        pause = min(pause * 2, RETRY_MAX)
