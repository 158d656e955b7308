"""Which threads a namespace may use through the control API: its own, and another's
that a link lets it reach; any other is answered exactly like an unknown thread, so a
conduit can neither use nor learn about the threads of another namespace."""

from __future__ import annotations

from ore_core._nats.codec import namespace_of
from ore_core.bridge.cache import LinkCache
from ore_core.bus.api.api_base import ApiFailure
from ore_core.errors import ThreadNotFound
from ore_core.ledger.thread import Thread
from ore_core.session.manager import Manager

__all__ = ["ThreadAccess"]


class ThreadAccess:
    """The threads of `manager` a namespace may use. `links` (the core's link cache;
    None in a service without bridging) lets a namespace reach another's thread."""

    __slots__ = ("_links", "_manager")

    def __init__(self, manager: Manager, links: LinkCache | None) -> None:
        self._manager = manager
        self._links = links

    async def linked(self, namespace: str, thread_id: str) -> bool:
        """Whether a link lets `namespace` reach `thread_id` (another's thread)."""
        return self._links is not None and await self._links.reaches(namespace, thread_id)

    async def own_thread(self, thread_id: str, namespace: str, *, unusable: bool = False) -> Thread:
        """The thread if `namespace` may use it; else the same 404 as an unknown one.

        `unusable`: the id was asked for a new thread; another namespace's is answered
        as an id `namespace` may not use (409), saying nothing of the thread.
        """
        try:
            thread = await self._manager.get_thread(thread_id)
        except ThreadNotFound:
            thread = None
        if (
            thread is not None
            and namespace_of(thread) != namespace
            and not unusable
            and await self.linked(namespace, thread_id)
        ):
            return thread  # another's thread, reached through a link
        if thread is None or namespace_of(thread) != namespace:
            if unusable:
                raise ApiFailure(
                    409,
                    f"thread id {thread_id} cannot be used in namespace {namespace}: pick another",
                )
            raise ApiFailure(404, f"thread {thread_id} not found in namespace {namespace}")
        return thread
