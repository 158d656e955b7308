"""`until_answered`: the one retry policy of conduits (what passes, deadline, log)."""

from __future__ import annotations

import asyncio

import pytest
from structlog.testing import capture_logs

from ore_core.conduit import core_away, until_answered
from ore_core.errors import ApiError, BusError, PermissionDenied


class Flaky:
    """Fails with each of `failures` in turn, then answers "ok"; counts the calls."""

    def __init__(self, *failures: Exception) -> None:
        self.failures = list(failures)
        self.calls = 0

    async def __call__(self) -> str:
        self.calls += 1
        if self.failures:
            raise self.failures.pop(0)
        return "ok"


@pytest.mark.parametrize(
    ("error", "passes"),
    [
        (BusError("no responders"), True),
        (ApiError(503, "internal", "the store is failing"), True),
        (ApiError(404, "not_found", "no such thread"), False),
        (PermissionDenied("publish", "ore.in.x.t"), False),
        (ValueError("a bug"), False),
    ],
)
def test_core_away_passes_only_what_passes_with_time(error: Exception, passes: bool) -> None:
    assert core_away(error) is passes


async def test_a_core_that_comes_back_is_answered_after_one_log_line() -> None:
    call = Flaky(BusError("no responders"), ApiError(500, "internal", "boom"), BusError("timeout"))
    with capture_logs() as logs:
        assert await until_answered(call, "catch-up waits", thread_id="t1") == "ok"
    assert call.calls == 4
    waiting = [entry for entry in logs if entry["event"] == "catch-up waits: waiting"]
    assert len(waiting) == 1
    assert waiting[0]["thread_id"] == "t1"


async def test_a_refusal_is_raised_at_once() -> None:
    call = Flaky(PermissionDenied("publish", "ore.in.x.t"))
    with pytest.raises(PermissionDenied):
        await until_answered(call, "lookup")
    assert call.calls == 1


async def test_the_deadline_gives_the_last_failure_to_the_caller() -> None:
    call = Flaky(BusError("first"), BusError("second"))
    deadline = asyncio.get_running_loop().time()  # no time for another try
    with pytest.raises(BusError, match="first"):
        await until_answered(call, "lookup", deadline=deadline)
    assert call.calls == 1


async def test_a_stopped_caller_waits_no_more() -> None:
    call = Flaky(BusError("away"))
    with pytest.raises(BusError, match="away"):
        await until_answered(call, "catch-up", stopped=lambda: True)
    assert call.calls == 1


async def test_a_wider_passing_waits_for_the_platform_too() -> None:
    call = Flaky(TimeoutError("slack did not answer"))
    assert await until_answered(call, "event", passing=lambda exc: True) == "ok"
    assert call.calls == 2
