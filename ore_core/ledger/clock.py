"""Clocks: where turn timestamps come from, swappable so tests are deterministic."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Protocol, runtime_checkable

__all__ = ["Clock", "ClockFunc", "FixedClock", "SystemClock"]


@runtime_checkable
class Clock(Protocol):
    """Anything with `now()`; every type that stamps times accepts one."""

    def now(self) -> datetime:
        """The current time (timezone-aware)."""
        ...


class SystemClock:
    """The wall clock in UTC: the default, so stored timestamps never depend on the host zone."""

    def now(self) -> datetime:
        """`datetime.now(UTC)`."""
        return datetime.now(UTC)


class ClockFunc:
    """Adapts a plain function (`lambda: datetime(...)`) to the Clock protocol."""

    __slots__ = ("_func",)

    def __init__(self, func: Callable[[], datetime]) -> None:
        self._func = func

    def now(self) -> datetime:
        """Whatever the wrapped function returns."""
        return self._func()


class FixedClock:
    """A test clock: returns `start`, then moves forward by `step` on every call.

    With the default zero step every turn gets the same time; a non-zero step gives
    distinct, ordered timestamps without sleeping.
    """

    __slots__ = ("_next", "_step")

    def __init__(self, start: datetime, *, step: timedelta = timedelta(0)) -> None:
        self._next = start
        self._step = step

    def now(self) -> datetime:
        """The current reading; advances the clock by `step` afterwards."""
        value = self._next
        self._next = value + self._step
        return value
