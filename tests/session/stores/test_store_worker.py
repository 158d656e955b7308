"""SerialWorker: order, outcomes, batches of grouped calls, cancellation, shutdown."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Sequence
from functools import partial
from typing import Any

import pytest

from ore_core import StoreError
from ore_core.session.stores.worker import Call, SerialWorker
from tests.session.stores.worker_gate import Gate, queued_together, until


class Recorder:
    """A group runner that runs each batch, remembering the batch sizes."""

    def __init__(self) -> None:
        self.batches: list[int] = []

    def __call__(self, calls: Sequence[Call[Any]]) -> None:
        self.batches.append(len(calls))
        for call in calls:
            call.run()


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
async def worker(recorder: Recorder) -> AsyncIterator[SerialWorker]:
    worker = SerialWorker("ore-test-worker", group=recorder)
    yield worker
    await worker.close(lambda: None)


async def test_calls_run_on_one_thread_that_is_not_the_loops(worker: SerialWorker) -> None:
    names = {await worker.run(lambda: threading.current_thread().name) for _ in range(5)}
    assert names == {"ore-test-worker"}


async def test_calls_run_in_submission_order(worker: SerialWorker) -> None:
    seen: list[int] = []
    await asyncio.gather(*(worker.run(seen.append, n) for n in range(200)))
    assert seen == list(range(200))


async def test_each_caller_gets_its_own_result_or_error(worker: SerialWorker) -> None:
    def answer(n: int) -> int:
        if n == 2:
            raise ValueError("two is refused")
        return n * 10

    calls = (worker.run(answer, n) for n in range(4))
    outcomes = await asyncio.gather(*calls, return_exceptions=True)
    assert [outcomes[0], outcomes[1], outcomes[3]] == [0, 10, 30]
    assert isinstance(outcomes[2], ValueError)


async def test_grouped_calls_queued_together_reach_the_runner_as_one_batch(
    worker: SerialWorker, recorder: Recorder
) -> None:
    results = await queued_together(
        worker, [partial(worker.run, int, n, grouped=True) for n in range(5)]
    )
    assert (results, recorder.batches) == ([0, 1, 2, 3, 4], [5])


async def test_the_calls_of_one_loop_iteration_reach_an_idle_worker_as_one_batch(
    worker: SerialWorker, recorder: Recorder
) -> None:
    # Handed over at the iteration's end: the first call does not wake the worker alone
    # (one wake-up and one commit for the iteration's saves, not one for the first).
    await worker.run(int)  # the thread is up and idle
    results = await asyncio.gather(*(worker.run(int, n, grouped=True) for n in range(10)))
    assert (results, recorder.batches) == (list(range(10)), [10])


async def test_calls_from_another_loop_are_queued_at_once(
    worker: SerialWorker, recorder: Recorder
) -> None:
    await worker.run(int)  # this loop hands over per iteration; another one directly
    other = await asyncio.to_thread(asyncio.run, worker.run(int, 7, grouped=True))
    assert (other, recorder.batches, worker._handing) == (7, [1], [])


async def test_an_ungrouped_call_splits_the_batch_and_keeps_its_place(
    worker: SerialWorker, recorder: Recorder
) -> None:
    seen: list[str] = []
    calls = [
        lambda: worker.run(seen.append, "a", grouped=True),
        lambda: worker.run(seen.append, "b", grouped=True),
        lambda: worker.run(seen.append, "read"),
        lambda: worker.run(seen.append, "c", grouped=True),
    ]
    await queued_together(worker, calls)
    assert (seen, recorder.batches) == (["a", "b", "read", "c"], [2, 1])


async def test_a_runner_that_raises_fails_every_call_of_its_batch(recorder: Recorder) -> None:
    def broken(calls: Sequence[Call[Any]]) -> None:
        raise RuntimeError("runner broke")

    worker = SerialWorker("ore-test-worker", group=broken)
    try:
        results = await queued_together(
            worker, [lambda: worker.run(int, grouped=True) for _ in range(3)]
        )
        assert [str(result) for result in results] == ["runner broke"] * 3
        assert await worker.run(int) == 0
    finally:
        await worker.close(lambda: None)


async def test_a_call_cancelled_before_it_starts_is_skipped(worker: SerialWorker) -> None:
    ran: list[str] = []
    gate = Gate()
    held = await gate.occupy(worker)
    skipped = asyncio.ensure_future(worker.run(ran.append, "skipped"))
    await until(lambda: worker._queue.qsize() == 1)
    skipped.cancel()
    gate.released.set()
    await held
    await worker.run(ran.append, "after")
    assert (skipped.cancelled(), ran) == (True, ["after"])


async def test_close_runs_the_final_call_on_the_worker_and_stops_its_thread() -> None:
    worker = SerialWorker("ore-test-closing")
    await worker.run(int)
    final_on: list[str] = []
    await worker.close(lambda: final_on.append(threading.current_thread().name))
    alive = [t.name for t in threading.enumerate() if t.name == "ore-test-closing"]
    assert (final_on, alive) == (["ore-test-closing"], [])


async def test_run_after_close_raises_store_error() -> None:
    worker = SerialWorker("ore-test-closed")
    await worker.close(lambda: None)
    with pytest.raises(StoreError, match="ore-test-closed"):
        await worker.run(int)
