"""The control API's part in bridging: what links show a namespace, the admin link
methods, and the delivery reports with their platform id map (docs/bridging.md).

`ControlAPI` owns the request handling; this class answers the link questions it asks
(may `NS` reach thread T, which thread a lookup key is linked to, which stored subjects
`events.read` merges for `NS`) and the `deliveries.*` and `links.*` methods.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from nats.aio.client import Client as NatsClient
from nats.js.errors import BucketNotFoundError, NotFoundError

from ore_core._nats.codec import namespace_of
from ore_core.bridge.admin import LinkAdd, LinkAdmin, LinkList, LinkRef
from ore_core.bridge.cache import LinkCache
from ore_core.bridge.deliveries import DeliveryGet, DeliveryLookup, DeliveryMap, DeliveryReport
from ore_core.bridge.links import LinkStore
from ore_core.bus.api.access import ThreadAccess
from ore_core.bus.api.api_base import ApiFailure, Reply
from ore_core.bus.api.changes import ThreadChanges
from ore_core.endpoint import Endpoint, EndpointError
from ore_core.errors import ThreadCorrupt, ThreadNotFound
from ore_core.events import DeliveryEvent, EventContext
from ore_core.id_prefix import resolve_thread_id
from ore_core.session.manager import Manager
from ore_core.subjects import Subjects

__all__ = ["LinkApi"]

Handler = Callable[[Any], Awaitable[Reply]]


class LinkApi:
    """Link answers for the control API. `links` is the core's link cache (None: a
    service without bridging, whose admin link methods open `ORE_LINKS` themselves);
    `access` says which threads a namespace may use, `changes` writes a thread's link
    metadata, and `on_resolve(T, NS)` hears of a thread a delivery report resolves (the
    egress binds its subjects), as the control API's own `on_resolve` does."""

    def __init__(
        self,
        nc: NatsClient,
        manager: Manager,
        subjects: Subjects,
        links: LinkCache | None,
        *,
        access: ThreadAccess,
        changes: ThreadChanges,
        on_resolve: Callable[[str, str], object] | None = None,
    ) -> None:
        self._js = nc.jetstream()
        self._manager = manager
        self._subjects = subjects
        self._links = links
        self._access = access
        self._changes = changes
        self._on_resolve = on_resolve
        self._admin: LinkAdmin | None = None

    # -- what links show a namespace -------------------------------------------------

    async def linked_endpoint(self, namespace: str, key: str, value: str) -> str | None:
        """The thread a conduit's lookup key is linked to, if any (asked first)."""
        if self._links is None:
            return None
        try:
            endpoint = Endpoint(namespace, key, value)
        except EndpointError:  # not a linkable key (an empty value, say): never linked
            return None
        return await self._links.lookup(endpoint)

    async def endpoint_view(self, namespace: str, thread_id: str, home: str) -> dict[str, str]:
        """`{key: value}` of the endpoint of `namespace` linked to `thread_id`, for the
        metadata `threads.get` shows `namespace` (empty when none, or when the key is
        `id`): how a conduit learns its own conversation of a thread created elsewhere
        (a gateway's, or another endpoint's) before it ever spoke there. A thread of
        `namespace`'s own is answered from the cache (no KV read on the common path)."""
        if self._links is None:
            return {}
        if namespace == home:
            links = self._links.cached(thread_id)
        else:
            links = await self._links.links_of(thread_id, namespace)
        linked = None if links is None else links.of_namespace(namespace)
        if linked is None or not linked.key.startswith(namespace + "."):
            return {}
        return {linked.key: linked.value}

    async def read_subjects(self, namespace: str, thread_id: str | None) -> list[str]:
        """The stored subjects `events.read` merges for `namespace`: one thread's (its
        home's when a link shows it to `namespace`), else every thread of `namespace`
        and every linked thread of another namespace."""
        events = self._subjects.events
        if thread_id is not None:
            home = None if self._links is None else await self._links.shows(namespace, thread_id)
            return [events(home or namespace, thread_id)]
        linked = [] if self._links is None else self._links.linked_threads(namespace)
        return [
            self._subjects.events_wildcard_of(namespace),
            *(events(home, thread) for thread, home in linked),
        ]

    # -- the admin link methods ------------------------------------------------------

    def admin_methods(self) -> list[tuple[str, type[Any], Handler]]:
        """(method, request model, handler) of `P.admin.links.*`."""

        def method(name: str) -> Handler:
            async def call(body: Any) -> Reply:
                handler: Handler = getattr(await self.admin(), name)
                return await handler(body)

            return call

        return [
            ("links.add", LinkAdd, method("add")),
            ("links.list", LinkList, method("list")),
            ("links.lookup", LinkRef, method("lookup")),
            ("links.remove", LinkRef, method("remove")),
        ]

    async def admin(self) -> LinkAdmin:
        """The handlers of the admin link methods (`ore serve` applies gateways with them)."""
        if self._admin is None:
            manager = self._manager

            async def home_of(thread_id: str) -> str:
                return namespace_of(await manager.get_thread(thread_id))

            async def resolve(typed: str) -> str:
                return await resolve_thread_id(
                    typed, self._thread_exists, self._thread_ids, "the store of the core"
                )

            async def metadata(thread_id: str) -> dict[str, str]:
                return (await manager.get_thread(thread_id)).meta().all()

            self._admin = LinkAdmin(
                await self._store(),
                resolve=resolve,
                home_of=home_of,
                metadata=metadata,
                set_metadata=self._changes.set_metadata,
                delete_metadata=self._changes.delete_metadata,
            )
        return self._admin

    async def _thread_exists(self, thread_id: str) -> bool:
        try:
            await self._manager.get_thread(thread_id)
        except ThreadNotFound:
            return False
        except ThreadCorrupt:
            return True  # it exists; what uses it reports what is wrong with it
        return True

    async def _thread_ids(self, after: str, limit: int) -> list[str]:
        return list(await self._manager.store.list_ids(after=after, limit=limit))

    # -- deliveries ------------------------------------------------------------------

    async def delivery_report(self, body: DeliveryReport, namespace: str) -> Reply:
        """Record a delivered copy's platform ids, or store a `delivery` event on the
        thread for a copy that is retrying or failed, or delivered after it was retrying
        (bridging.md "Delivery status")."""
        thread = await self._access.own_thread(body.thread, namespace)
        deliveries = DeliveryMap((await self._store()).kv)
        if body.status == "sending":
            claimed, entry = await deliveries.claim(
                namespace, thread.id, body.turn, body.platform_ids
            )
            return {"recorded": claimed, **entry}
        previous = await deliveries.note_last(namespace, body)
        if body.status == "delivered":
            if body.platform_ids:
                await deliveries.record(namespace, thread.id, body.turn, body.platform_ids)
            if previous is None or (previous["status"], previous["turn"]) != (
                "retrying",
                body.turn,
            ):
                return {"recorded": True}
        if self._on_resolve is not None:
            self._on_resolve(thread.id, namespace_of(thread))
        stream = await self._manager.attach(thread.id)
        await stream.emit(
            DeliveryEvent(
                turn=body.turn,
                endpoint=namespace,
                status=body.status,
                detail=body.detail,
                reason=body.reason,
                origin=body.origin,
                context=EventContext(provenance=namespace),
            )
        )
        return {"recorded": True}

    async def delivery_lookup(self, body: DeliveryLookup, namespace: str) -> Reply:
        deliveries = DeliveryMap((await self._store()).kv)
        return await deliveries.turn_of(namespace, body.platform_id)

    async def delivery_get(self, body: DeliveryGet, namespace: str) -> Reply:
        await self._access.own_thread(body.thread, namespace)
        deliveries = DeliveryMap((await self._store()).kv)
        return await deliveries.entry(namespace, body.thread, body.turn)

    async def _store(self) -> LinkStore:
        """The link records: the core's cache's store, else `ORE_LINKS` opened here."""
        if self._links is not None:
            return self._links.store
        try:
            return LinkStore(await self._js.key_value(self._subjects.links_bucket))
        except (NotFoundError, BucketNotFoundError):
            raise ApiFailure(
                500, f"KV bucket {self._subjects.links_bucket} missing: restart the core"
            ) from None
