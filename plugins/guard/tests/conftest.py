"""Fixtures for the ore-guard tests (they run in pytest's importlib mode: test modules
import nothing from here at runtime, only fixtures and, for type checkers, classes)."""

from __future__ import annotations

import pytest


class FakeClock:
    """A monotonic clock that moves only when the test says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    """A fresh `FakeClock` (pass it as `clock=` to the rate limiter or the interceptor)."""
    return FakeClock()
