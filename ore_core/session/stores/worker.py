"""SerialWorker: the one OS thread a store runs its blocking calls on, in order, in batches.

The event loop hands calls over once per loop iteration: `run` collects them, and a
callback at the end of the iteration puts them on a `queue.SimpleQueue` (the floor's
grouping: a save made early in an iteration does not wake the worker to commit it
alone while the rest of the iteration's saves are still being made). The worker
takes everything queued at that moment, runs it in submission order and settles the
whole run's futures with one `call_soon_threadsafe`, so N calls queued together cost
one wake-up of the worker and one of the loop instead of N each (what
`run_in_executor` costs). Consecutive calls marked `grouped` go to the store's
`group` runner as one batch: the SQLite store commits a batch of saves in one
transaction, which is what makes a thousand concurrent saves cheap.
"""

from __future__ import annotations

import asyncio
import itertools
import queue
import threading
from collections.abc import Callable, Sequence
from operator import attrgetter
from typing import Any, Generic, TypeVar

from ore_core.errors import StoreError

__all__ = ["Call", "GroupRunner", "SerialWorker"]

_T = TypeVar("_T")


class Call(Generic[_T]):
    """One call handed to the worker and, once run, its outcome.

    `run` and `fail` are for the worker thread (and a store's group runner); the
    future is settled on the caller's loop.
    """

    __slots__ = ("_args", "_func", "error", "future", "grouped", "loop", "result")

    def __init__(
        self,
        func: Callable[..., _T],
        args: tuple[object, ...],
        loop: asyncio.AbstractEventLoop,
        *,
        grouped: bool,
    ) -> None:
        self._func = func
        self._args = args
        self.loop = loop
        self.future: asyncio.Future[_T] = loop.create_future()
        self.grouped = grouped
        self.result: _T | None = None
        self.error: BaseException | None = None

    def run(self) -> BaseException | None:
        """Run the call and keep its outcome; returns its error (None: it succeeded).

        A call whose caller stopped waiting before it started is skipped, as
        `run_in_executor` skips a cancelled job.
        """
        self.error = None  # a group runner may run a call again after undoing its batch
        if self.future.cancelled():  # read across threads: a late cancel just runs it
            return None
        try:
            self.result = self._func(*self._args)
        except BaseException as exc:  # the caller gets it, whatever it is
            self.error = exc
        return self.error

    def fail(self, error: BaseException) -> None:
        """The batch this call ran in was undone: report `error` unless it failed already."""
        if self.error is None:
            self.error = error

    def settle(self) -> None:
        """Hand the outcome to the waiting caller (on its loop)."""
        if self.future.done():  # cancelled meanwhile
            return
        if self.error is not None:
            self.future.set_exception(self.error)
        else:
            self.future.set_result(self.result)  # type: ignore[arg-type]  # it ran: a _T


GroupRunner = Callable[[Sequence[Call[Any]]], None]
"""Runs a batch of grouped calls (`Call.run` each) as one unit, e.g. one transaction.
If it raises, every call of the batch fails with that error (a call that failed on
its own keeps its own error)."""


def _settle_all(calls: Sequence[Call[Any]]) -> None:
    for call in calls:
        call.settle()


def _wake(loop: asyncio.AbstractEventLoop, calls: Sequence[Call[Any]]) -> None:
    """Have `loop` settle `calls` (one thread-safe wake-up)."""
    try:
        loop.call_soon_threadsafe(_settle_all, calls)
    except RuntimeError:  # that loop is closed: nobody is waiting any more
        pass


class SerialWorker:
    """One dedicated OS thread that runs blocking calls one at a time, in submission order.

    The event loop never waits on the disk, and the resource the worker guards (a
    sqlite3 connection, a journal repository) is only ever touched from that thread,
    so it needs no locks of its own. The thread starts with the first call and stops
    in `close`; it is a daemon so that a store nobody closed cannot hang interpreter
    exit (its files are then left as after a crash, which every store survives).
    """

    def __init__(self, name: str, group: GroupRunner | None = None) -> None:
        self.name = name
        self._group = group
        self._queue: queue.SimpleQueue[Call[Any] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._stopped = False
        self._outstanding = 0  # calls handed over whose callers have not resumed yet
        # Calls of this loop iteration not yet queued; only `_loop`'s (the first caller's)
        # calls wait here, those of any other loop are queued at once.
        self._handing: list[Call[Any]] = []
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def idle(self) -> bool:
        """No call is queued, running or on its way back (read it on the callers' loop)."""
        return self._outstanding == 0

    async def run(self, func: Callable[..., _T], *args: object, grouped: bool = False) -> _T:
        """Run `func(*args)` on the worker thread and wait for its result.

        `grouped` calls queued back to back are run together by the `group` runner
        (without one they run one by one, as any other call).
        """
        if self._stopped:
            raise StoreError(f"worker {self.name} is stopped: open a new store")
        loop = asyncio.get_running_loop()
        call = Call(func, args, loop, grouped=grouped)
        if loop is (self._loop or self._first(loop)):
            if not self._handing:
                loop.call_soon(self._hand_over)
            self._handing.append(call)
        else:
            self._queue.put(call)
        self._outstanding += 1
        try:
            return await call.future
        finally:
            self._outstanding -= 1

    def _first(self, loop: asyncio.AbstractEventLoop) -> asyncio.AbstractEventLoop:
        """Start the thread for the first caller, whose loop hands its calls over in batches."""
        self._loop = loop
        self._thread = threading.Thread(target=self._serve, name=self.name, daemon=True)
        self._thread.start()
        return loop

    def _hand_over(self) -> None:
        """Queue the loop iteration's calls (the first `put` wakes the worker)."""
        calls, self._handing = self._handing, []
        put = self._queue.put
        for call in calls:
            put(call)

    async def close(self, final: Callable[[], None]) -> None:
        """Run `final` (the resource's own close) on the worker, then stop the thread."""
        try:
            await self.run(final)
        finally:
            self._stopped = True
            thread = self._thread
            if thread is not None:
                self._queue.put(None)
                await asyncio.to_thread(thread.join)

    # -- on the worker thread ------------------------------------------------------------------

    def _serve(self) -> None:
        pending = self._queue
        while True:
            first = pending.get()
            if first is None:
                return
            calls = [first]
            # Only this thread takes from the queue, so what `empty` says stays true
            # until `get_nowait` (cheaper than letting it raise queue.Empty each time).
            while not pending.empty():
                call = pending.get_nowait()
                if call is None:  # only close() sends it, after its final call settled
                    self._run_all(calls)
                    return
                calls.append(call)
            self._run_all(calls)

    def _run_all(self, calls: list[Call[Any]]) -> None:
        if len(calls) == 1:  # the common case under light load: no grouping to do
            self._run_batch(calls[0].grouped, calls)
            return
        for grouped, run in itertools.groupby(calls, key=attrgetter("grouped")):
            self._run_batch(grouped, list(run))

    def _run_batch(self, grouped: bool, batch: list[Call[Any]]) -> None:
        if grouped and self._group is not None:
            try:
                self._group(batch)
            except BaseException as exc:  # a broken runner must not strand its callers
                for call in batch:
                    call.fail(exc)
        else:
            for call in batch:
                call.run()
        self._deliver(batch)

    @staticmethod
    def _deliver(batch: list[Call[Any]]) -> None:
        """Settle the batch's futures with one wake-up per loop (normally just one)."""
        first = batch[0].loop
        if all(call.loop is first for call in batch):
            _wake(first, batch)
            return
        for loop, calls in itertools.groupby(batch, key=attrgetter("loop")):
            _wake(loop, list(calls))
