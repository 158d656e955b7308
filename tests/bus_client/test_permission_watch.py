"""PermissionWatch.guard: a refused publish ends the wait at once, in the caller's task.

Pure asyncio: `observe` is fed the error text nats-py hands to `error_cb`, and the
guarded call is a coroutine (as `nc.request(...)` is) awaiting a future the test
controls.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from typing import Any

import pytest

from ore_core import PermissionDenied
from ore_core.conduit.connection import PermissionWatch

SUBJECT = "ore.api.test.threads.get"


def refusal(subject: str = SUBJECT) -> Exception:
    return Exception(f'nats: permissions violation for publish to "{subject}"')


async def request(reply: asyncio.Future[str]) -> str:
    """A stand-in for `nc.request(...)`: a coroutine that waits for its reply."""
    return await reply


@pytest.fixture
async def tasks_started() -> AsyncGenerator[list[str], None]:
    started: list[str] = []
    loop = asyncio.get_running_loop()
    previous = loop.get_task_factory()

    def counting(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
        started.append(getattr(coro, "__qualname__", repr(coro)))
        return asyncio.Task(coro, loop=loop, **kwargs)

    loop.set_task_factory(counting)
    yield started
    loop.set_task_factory(previous)


async def test_a_refusal_raises_permission_denied_and_leaves_no_cancellation_behind() -> None:
    watch = PermissionWatch()
    reply: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    asyncio.get_running_loop().call_soon(watch.observe, refusal())
    with pytest.raises(PermissionDenied, match=r"publish to 'ore\.api\.test\.threads\.get'"):
        await watch.guard(SUBJECT, request(reply))
    task = asyncio.current_task()
    assert task is not None
    assert task.cancelling() == 0
    await asyncio.sleep(0)  # still running: no cancellation was left pending
    assert reply.cancelled(), "the refused call is not awaited any more"


async def test_an_answered_call_returns_and_a_later_refusal_touches_nothing() -> None:
    watch = PermissionWatch()
    reply: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    reply.set_result("answer")
    assert await watch.guard(SUBJECT, request(reply)) == "answer"
    assert watch.observe(refusal()) is True
    await asyncio.sleep(0)
    await asyncio.sleep(0)  # a late refusal must not cancel the caller
    assert watch._publishers == {}


async def test_a_refusal_of_another_subject_does_not_end_the_wait() -> None:
    watch = PermissionWatch()
    loop = asyncio.get_running_loop()
    reply: asyncio.Future[str] = loop.create_future()
    loop.call_soon(watch.observe, refusal("ore.api.test.threads.list"))
    loop.call_soon(lambda: loop.call_soon(reply.set_result, "answer"))
    assert await watch.guard(SUBJECT, request(reply)) == "answer"


async def test_cancelling_the_caller_stays_a_cancellation_even_when_refused_too() -> None:
    watch = PermissionWatch()
    loop = asyncio.get_running_loop()
    reply: asyncio.Future[str] = loop.create_future()
    guarded = asyncio.ensure_future(watch.guard(SUBJECT, request(reply)))
    await asyncio.sleep(0)  # the guard waits
    watch.observe(refusal())
    guarded.cancel()
    with pytest.raises(asyncio.CancelledError):
        await guarded


async def test_cancelling_the_caller_is_a_cancellation() -> None:
    watch = PermissionWatch()
    reply: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    guarded = asyncio.ensure_future(watch.guard(SUBJECT, request(reply)))
    await asyncio.sleep(0)
    guarded.cancel()
    with pytest.raises(asyncio.CancelledError):
        await guarded
    assert watch._publishers == {}


async def test_a_guarded_call_starts_no_task(tasks_started: list[str]) -> None:
    watch = PermissionWatch()
    loop = asyncio.get_running_loop()
    before = len(tasks_started)  # the test's own task
    for _ in range(10):
        reply: asyncio.Future[str] = loop.create_future()
        loop.call_soon(reply.set_result, "answer")
        assert await watch.guard(SUBJECT, request(reply)) == "answer"
    assert tasks_started[before:] == []
