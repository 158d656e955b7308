"""LinkCache: what every worker asks about links, from a cache fed by a KV watch.

Every worker keeps the `th.*` records of `ORE_LINKS` in memory, updated by a watch of
the bucket, so the hot paths ask a dict: the egress (`copies`: which namespaces are
shown a thread besides its home) and the ingress of a thread's own namespace never
wait. A question the cache answers "no" to (a link it has not heard of yet) goes to
the KV, so a link just added is honoured at once by every worker, and every worker
gives the same answer about a thread.

The egress copies from the cache alone: a batch stored in the moment between an add
and the watch's update is not copied live, and the endpoint's feed fetches it at its
next batch (its `Nats-Last-Sequence` shows the gap) or catch-up.
"""

from __future__ import annotations

import asyncio

import structlog
from nats.errors import ConnectionClosedError
from nats.errors import Error as NatsError
from nats.js.kv import KeyValue

from ore_core.bridge.links import LinkStore
from ore_core.bridge.records import LinkSet
from ore_core.endpoint import Endpoint
from ore_core.tasks import TaskScope

__all__ = ["LinkCache"]

log = structlog.get_logger("ore.bridge")

_NO_COPIES: tuple[str, ...] = ()
_REWATCH = 1.0  # seconds before a watch that ended is started again


class LinkCache:
    """The link sets of every linked thread, kept current by a watch (`start`)."""

    def __init__(self, store: LinkStore) -> None:
        self.store = store
        self._links: dict[str, LinkSet] = {}
        self._copies: dict[str, tuple[str, ...]] = {}
        self.tasks = TaskScope("links")
        """The watch (the core adopts it)."""
        self._ready = asyncio.Event()

    @property
    def kv(self) -> KeyValue:
        return self.store.kv

    async def start(self) -> None:
        """Start watching; returns once the records stored now are in the cache."""
        self.tasks.spawn(self._watch_loop(), name="ore-links-watch")
        await self._ready.wait()

    async def stop(self) -> None:
        await self.tasks.aclose()

    # -- the hot paths (no waiting) ------------------------------------------------

    def copies(self, thread_id: str) -> tuple[str, ...]:
        """Namespaces besides its home shown `thread_id` (out/inout links), as cached."""
        return self._copies.get(thread_id, _NO_COPIES) if self._copies else _NO_COPIES

    def cached(self, thread_id: str) -> LinkSet | None:
        """The thread's link set as cached (None: no links known here)."""
        return self._links.get(thread_id)

    # -- questions that may go to the KV ---------------------------------------------

    async def links_of(self, thread_id: str, namespace: str) -> LinkSet | None:
        """The thread's link set if it lists an endpoint of `namespace` (the cache
        first; the KV when the cache does not show one)."""
        links = self._links.get(thread_id)
        if links is not None and links.of_namespace(namespace) is not None:
            return links
        found = await self.store.link_set(thread_id)
        if found is None:
            self._forget(thread_id)
            return None
        self._remember(thread_id, found[0])
        return found[0] if found[0].of_namespace(namespace) is not None else None

    async def admits(self, namespace: str, thread_id: str) -> bool:
        """Whether messages of `namespace` may reach `thread_id` (an in/inout link)."""
        links = await self.links_of(thread_id, namespace)
        linked = None if links is None else links.of_namespace(namespace)
        return linked is not None and linked.direction != "out"

    async def shows(self, namespace: str, thread_id: str) -> str | None:
        """The home namespace of `thread_id` when `namespace` is shown it (out/inout)."""
        links = await self.links_of(thread_id, namespace)
        linked = None if links is None else links.of_namespace(namespace)
        if links is None or linked is None or linked.direction == "in":
            return None
        return links.home

    async def reaches(self, namespace: str, thread_id: str) -> bool:
        """Whether `namespace` is linked to `thread_id` in any direction."""
        return await self.links_of(thread_id, namespace) is not None

    async def lookup(self, endpoint: Endpoint) -> str | None:
        """The thread `endpoint` is linked to, or None (`threads.lookup` asks first)."""
        return await self.store.thread_of(endpoint)

    def linked_threads(self, namespace: str) -> list[tuple[str, str]]:
        """(thread, home) of every cached thread that shows `namespace` (out/inout)."""
        found = []
        for thread_id, links in self._links.items():
            linked = links.of_namespace(namespace)
            if linked is not None and linked.direction != "in" and links.home != namespace:
                found.append((thread_id, links.home))
        return found

    # -- the watch ------------------------------------------------------------------

    def _remember(self, thread_id: str, links: LinkSet) -> None:
        self._links[thread_id] = links
        copies = links.copies()
        if copies:
            self._copies[thread_id] = copies
        else:
            self._copies.pop(thread_id, None)

    def _forget(self, thread_id: str) -> None:
        self._links.pop(thread_id, None)
        self._copies.pop(thread_id, None)

    async def _watch_loop(self) -> None:
        while True:
            try:
                await self._watch()
            except ConnectionClosedError:
                return  # the core closed its connection: it is stopping
            except (NatsError, TimeoutError) as exc:
                log.warning("link watch ended; starting it again", error=repr(exc))
            await asyncio.sleep(_REWATCH)

    async def _watch(self) -> None:
        watcher = await self.kv.watch("th.>")
        try:
            async for entry in watcher:
                if entry is None:  # the stored records are all in
                    self._ready.set()
                    continue
                thread_id = entry.key[3:]
                if entry.operation in ("DEL", "PURGE") or not entry.value:
                    self._forget(thread_id)
                    continue
                try:
                    self._remember(thread_id, LinkSet.model_validate_json(entry.value))
                except ValueError:
                    log.warning("unreadable link record skipped", key=entry.key)
        finally:
            await watcher.stop()  # type: ignore[no-untyped-call]
