"""`uninterrupted`: a step that must end once begun (a message Telegram accepted is
recorded), even when its task is cancelled by a polite stop."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from typing import TypeVar

__all__ = ["STOP_GRACE", "uninterrupted"]

_T = TypeVar("_T")
STOP_GRACE = 3.0  # seconds a polite stop waits for a message being sent to be recorded


async def uninterrupted(step: Awaitable[_T]) -> _T:
    """Run `step` to its end even if the caller is cancelled meanwhile (a polite stop):
    a message Telegram accepted must be recorded, or a restart would send it again. The
    stop waits `STOP_GRACE` seconds at most (Telegram unreachable, say)."""
    task = asyncio.ensure_future(step)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        with contextlib.suppress(Exception, asyncio.CancelledError):
            await asyncio.wait_for(task, STOP_GRACE)
        raise
