"""Changes the control API makes to a thread, applied where they are announced.

A change goes through the thread's stream when there is one to announce it: the active
stream, or one attached here when this worker owns the thread (a request for a thread
another worker owns was forwarded to that worker before it got here). With neither, the
change is written to the store, unannounced: no worker runs the thread.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from ore_core.bus.api.api_base import ApiFailure
from ore_core.ledger.thread import Thread
from ore_core.session.manager import Manager
from ore_core.session.stream import Stream
from ore_core.subjects import NAMESPACE_KEY

__all__ = ["ThreadChanges"]


class ThreadChanges:
    """Applies changes to the threads of `manager`; `owns(T)` is true when this worker
    owns thread T (None: a worker that owns none, so only active streams announce)."""

    __slots__ = ("_manager", "_owns")

    def __init__(self, manager: Manager, owns: Callable[[str], bool] | None) -> None:
        self._manager = manager
        self._owns = owns

    async def apply(
        self,
        thread_id: str,
        live: Callable[[Stream], Awaitable[None]],
        stored: Callable[[Thread], object],
    ) -> Thread:
        """`live(stream)` through the thread's stream, else `stored(thread)` saved to the
        store; the thread as changed."""
        stream = self._manager.stream_of(thread_id)
        if stream is None and self._owns is not None and self._owns(thread_id):
            stream = await self._manager.attach(thread_id)
        if stream is not None:
            await live(stream)
            return stream.state()
        thread = await self._manager.store.get(thread_id)
        stored(thread)
        await self._manager.store.save(thread)
        return thread

    async def set_metadata(self, thread_id: str, key: str, value: str) -> Thread:
        """Set metadata `key` of the thread (never its namespace)."""
        _check_key(key)
        return await self.apply(
            thread_id,
            lambda stream: stream.set_metadata(key, value),
            lambda thread: thread.meta().set(key, value),
        )

    async def delete_metadata(self, thread_id: str, key: str) -> Thread:
        """Delete metadata `key` of the thread (never its namespace)."""
        _check_key(key)
        return await self.apply(
            thread_id,
            lambda stream: stream.delete_metadata(key),
            lambda thread: thread.meta().delete(key),
        )


def _check_key(key: str) -> None:
    if key == NAMESPACE_KEY:
        raise ApiFailure(
            400, f"key: {NAMESPACE_KEY} is set when a thread is created and never changes"
        )
