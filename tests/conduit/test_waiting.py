"""`until_answered`: the one retry policy of conduits (what passes, deadline, log), and
`across_reconnects`, its form for a stream connected again."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from structlog.testing import capture_logs

from ore_core.conduit import core_away, until_answered
from ore_core.conduit.waiting import across_reconnects
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


async def test_a_wait_the_failure_names_is_waited_instead_of_the_schedule() -> None:
    # A rate limit asking for longer than the deadline leaves: the schedule's short
    # pause would have tried again.
    call = Flaky(BusError("slow down"))
    deadline = asyncio.get_running_loop().time() + 1.0
    with pytest.raises(BusError):
        await until_answered(call, "sync", deadline=deadline, asked=lambda _: 60.0)
    assert call.calls == 1


class Connections:
    """Each connection yields its items, then fails with its error (None: it ends)."""

    def __init__(self, *connections: tuple[list[str], Exception | None]) -> None:
        self.connections = list(connections)
        self.made = 0

    async def __call__(self) -> AsyncIterator[str]:
        self.made += 1
        items, error = self.connections.pop(0)
        for item in items:
            yield item
        if error is not None:
            raise error


async def test_a_stream_is_connected_again_after_it_fails_or_ends() -> None:
    connect = Connections((["a"], ConnectionError("reset")), ([], None), (["b"], ValueError("x")))
    stream = across_reconnects(connect, "gateway", passing=lambda e: isinstance(e, OSError))
    with capture_logs() as logs:
        assert [await anext(stream), await anext(stream)] == ["a", "b"]
    assert connect.made == 3
    assert [entry["event"] for entry in logs] == ["gateway: reconnecting"]  # one outage


async def test_a_stream_failing_with_what_does_not_pass_raises_it() -> None:
    connect = Connections(([], PermissionError("refused")))
    stream = across_reconnects(connect, "gateway", passing=lambda e: isinstance(e, TimeoutError))
    with pytest.raises(PermissionError):
        await anext(stream)
    assert connect.made == 1
