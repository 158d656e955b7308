"""LinkStore: add, remove and read links in KV bucket `ORE_LINKS` (see `records`).

Add = create the endpoint's `ep` record (create-only), compare-and-set the thread's
`th` record, then confirm `ep` by a write at the revision it was created with: of
concurrent adds of one endpoint exactly one wins (one that took over a record not yet
listed makes the first one's confirmation fail, and that one undoes its `th`). Remove =
compare-and-set `th`, then delete `ep`. A crash between the two writes leaves an `ep`
that no `th` lists: readers ignore it (the `th` record is the truth) and the next
add or remove of that endpoint repairs it.

Concurrency: any number of workers and CLIs at once; every write is a create-only or
a revision CAS, retried after a conflict with what is stored then.
"""

from __future__ import annotations

from dataclasses import dataclass

from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from ore_core.bridge.records import (
    EndpointRecord,
    LinkedEndpoint,
    LinkSet,
    endpoint_key,
    thread_key,
)
from ore_core.endpoint import Answer, Direction, Endpoint
from ore_core.errors import OreError

__all__ = ["LinkConflict", "LinkError", "LinkNotFound", "LinkStore", "LinkSettings"]

_ATTEMPTS = 32  # CAS rounds before giving up (only a storm of writers to one thread)


class LinkError(OreError):
    """A link cannot be made or removed; the message says why."""


class LinkConflict(LinkError):
    """The endpoint (or its namespace, or the thread's gateway) is taken."""


class LinkNotFound(LinkError, LookupError):
    """The endpoint is linked to no thread."""


@dataclass(frozen=True, slots=True)
class LinkSettings:
    """The thread's settings an add sets (None: keep what the thread has)."""

    gateway: str | None = None
    answer: Answer | None = None
    label: str | None = None
    reaction_lines: bool | None = None


class LinkStore:
    """The link records of one deployment (`kv`: its `ORE_LINKS` bucket)."""

    def __init__(self, kv: KeyValue) -> None:
        self.kv = kv

    async def link_set(self, thread_id: str) -> tuple[LinkSet, int] | None:
        """The thread's link set and its revision; None when it has no links."""
        try:
            entry = await self.kv.get(thread_key(thread_id))
        except KeyNotFoundError:
            return None
        if not entry.value or entry.revision is None:
            return None
        return LinkSet.model_validate_json(entry.value), entry.revision

    async def thread_of(self, endpoint: Endpoint) -> str | None:
        """The thread `endpoint` is linked to (as its thread's link set says), or None."""
        found = await self._endpoint_record(endpoint)
        if found is None:
            return None
        record = found[0]
        links = await self.link_set(record.thread)
        if links is None or links[0].find(endpoint) is None:
            return None  # an orphan of a crashed add or remove
        return record.thread

    async def threads(self) -> dict[str, LinkSet]:
        """Every thread with links, by id."""
        found: dict[str, LinkSet] = {}
        watcher = await self.kv.watch("th.>", ignore_deletes=True)
        try:
            async for entry in watcher:
                if entry is None:  # everything stored now is in
                    break
                if entry.value:
                    found[entry.key[3:]] = LinkSet.model_validate_json(entry.value)
        finally:
            await watcher.stop()  # type: ignore[no-untyped-call]
        return found

    async def add(
        self,
        thread_id: str,
        home: str,
        endpoint: Endpoint,
        direction: Direction,
        settings: LinkSettings = LinkSettings(),
        *,
        exist_ok: bool = False,
    ) -> LinkSet:
        """Link `endpoint` to `thread_id` (whose home namespace is `home`); returns the
        thread's link set.

        LinkConflict when the endpoint belongs to another thread (its gateway named),
        is linked to this one already (unless `exist_ok` and nothing differs), when
        the thread lists another endpoint of the namespace, or belongs to another
        gateway.
        """
        record = EndpointRecord(
            **endpoint.as_dict(),
            direction=direction,
            thread=thread_id,
            gateway=settings.gateway,
        )
        linked = LinkedEndpoint(**endpoint.as_dict(), direction=direction)
        key, data = endpoint_key(endpoint), record.model_dump_json().encode()
        for _ in range(_ATTEMPTS):
            claimed = await self._claim(record, data, exist_ok=exist_ok)
            if claimed is None:
                continue  # the record changed under us: look again
            revision, listed = claimed
            try:
                links = await self._list_endpoint(thread_id, home, linked, settings)
            except LinkConflict:
                await self._release(endpoint, thread_id)
                raise
            if listed:
                return links  # it was ours and listed before: nobody can take it over
            try:  # confirm: the record is still the one we wrote (nobody took it over)
                await self.kv.update(key, data, last=revision)
            except KeyWrongLastSequenceError:
                await self._unlist(thread_id, endpoint)
                raise LinkConflict(
                    f"endpoint {endpoint} is being linked to another thread at the same time"
                ) from None
            return links
        raise LinkError(f"endpoint {endpoint}: too many concurrent changes; try again")

    async def _claim(
        self, record: EndpointRecord, data: bytes, *, exist_ok: bool
    ) -> tuple[int, bool] | None:
        """Write the `ep` record: its revision and whether the thread lists it already
        (`exist_ok`); None to try again; LinkConflict if another thread holds it.

        A record no thread lists is an orphan of a crash, or an add in progress: it is
        taken over, and of the two the one whose confirming write (`add`) comes first
        keeps it.
        """
        endpoint = record.endpoint
        key = endpoint_key(endpoint)
        try:
            return await self.kv.create(key, data), False
        except KeyWrongLastSequenceError:
            pass
        found = await self._endpoint_record(endpoint)
        if found is None:
            return None  # deleted meanwhile
        held, revision = found
        links = await self.link_set(held.thread)
        listed = links[0].find(endpoint) if links is not None else None
        if listed is None:  # an orphan, or an add in progress: take it over
            try:
                return await self.kv.update(key, data, last=revision), False
            except KeyWrongLastSequenceError:
                return None
        if held.thread == record.thread:
            if exist_ok and listed.direction == record.direction:
                return revision, True  # ours already: the settings may still change
            raise LinkConflict(
                f"endpoint {endpoint} is linked to thread {held.thread} already "
                f"(direction {listed.direction}); remove it first to change it"
            )
        holder = f" by gateway {held.gateway!r}" if held.gateway else ""
        raise LinkConflict(
            f"endpoint {endpoint} is linked to thread {held.thread}{holder}: an endpoint "
            "belongs to one thread; remove that link first"
        )

    async def _list_endpoint(
        self, thread_id: str, home: str, linked: LinkedEndpoint, settings: LinkSettings
    ) -> LinkSet:
        """Add `linked` to the thread's link set (created if none), by CAS."""
        key = thread_key(thread_id)
        for _ in range(_ATTEMPTS):
            current = await self.link_set(thread_id)
            if current is None:
                links = LinkSet(
                    home=home,
                    gateway=settings.gateway,
                    answer=settings.answer or "origin",
                    **({} if settings.label is None else {"label": settings.label}),
                    reaction_lines=bool(settings.reaction_lines),
                    endpoints=(linked,),
                )
                try:
                    await self.kv.create(key, links.model_dump_json().encode())
                except KeyWrongLastSequenceError:
                    continue
                return links
            links, revision = current
            self._check_fits(thread_id, links, linked, settings)
            listed = links.find(linked.endpoint)
            endpoints = tuple(linked if e is listed else e for e in links.endpoints)
            changes: dict[str, object] = {
                "endpoints": endpoints if listed is not None else (*endpoints, linked)
            }
            if settings.gateway is not None:
                changes["gateway"] = settings.gateway
            if settings.answer is not None:
                changes["answer"] = settings.answer
            if settings.label is not None:
                changes["label"] = settings.label
            if settings.reaction_lines is not None:
                changes["reaction_lines"] = settings.reaction_lines
            updated = links.model_copy(update=changes)
            if updated == links:
                return links  # applied before (a gateway at every start)
            try:
                await self.kv.update(key, updated.model_dump_json().encode(), last=revision)
            except KeyWrongLastSequenceError:
                continue
            return updated
        raise LinkError(f"thread {thread_id}: too many concurrent link changes; try again")

    @staticmethod
    def _check_fits(
        thread_id: str, links: LinkSet, linked: LinkedEndpoint, settings: LinkSettings
    ) -> None:
        same_namespace = links.of_namespace(linked.namespace)
        if same_namespace is not None and same_namespace.endpoint != linked.endpoint:
            raise LinkConflict(
                f"thread {thread_id} is linked to {same_namespace.endpoint} already: a thread "
                f"has one endpoint per conduit namespace ({linked.namespace})"
            )
        if settings.gateway is not None and links.gateway not in (None, settings.gateway):
            raise LinkConflict(
                f"thread {thread_id} belongs to gateway {links.gateway!r}, not {settings.gateway!r}"
            )

    async def _release(self, endpoint: Endpoint, thread_id: str) -> None:
        """Delete the `ep` record if it still names `thread_id` (undo of `_claim`)."""
        found = await self._endpoint_record(endpoint)
        if found is not None and found[0].thread == thread_id:
            try:
                await self.kv.delete(endpoint_key(endpoint), last=found[1])
            except KeyWrongLastSequenceError:
                pass

    async def remove(self, endpoint: Endpoint) -> str:
        """Unlink `endpoint`; returns the thread it was linked to (LinkNotFound if none)."""
        found = await self._endpoint_record(endpoint)
        if found is None:
            raise LinkNotFound(f"endpoint {endpoint} is not linked to any thread")
        record, revision = found
        listed = await self._unlist(record.thread, endpoint)
        try:
            await self.kv.delete(endpoint_key(endpoint), last=revision)
        except KeyWrongLastSequenceError:
            pass  # linked again meanwhile: that link stands
        if not listed:
            raise LinkNotFound(f"endpoint {endpoint} is not linked to any thread")
        return record.thread

    async def unlink_thread(self, thread_id: str) -> list[Endpoint]:
        """Remove every link of `thread_id` (it was deleted); returns the endpoints."""
        found = await self.link_set(thread_id)
        if found is None:
            return []
        endpoints = [linked.endpoint for linked in found[0].endpoints]
        for endpoint in endpoints:
            try:
                await self.remove(endpoint)
            except LinkNotFound:
                pass  # removed meanwhile
        return endpoints

    async def _unlist(self, thread_id: str, endpoint: Endpoint) -> bool:
        """Take `endpoint` out of the thread's link set (deleted when empty), by CAS;
        False when it was not listed."""
        key = thread_key(thread_id)
        for _ in range(_ATTEMPTS):
            current = await self.link_set(thread_id)
            if current is None:
                return False
            links, revision = current
            if links.find(endpoint) is None:
                return False
            rest = tuple(e for e in links.endpoints if e.endpoint != endpoint)
            try:
                if rest:
                    updated = links.model_copy(update={"endpoints": rest})
                    await self.kv.update(key, updated.model_dump_json().encode(), last=revision)
                else:
                    await self.kv.delete(key, last=revision)
            except KeyWrongLastSequenceError:
                continue
            return True
        raise LinkError(f"thread {thread_id}: too many concurrent link changes; try again")

    async def _endpoint_record(self, endpoint: Endpoint) -> tuple[EndpointRecord, int] | None:
        try:
            entry = await self.kv.get(endpoint_key(endpoint))
        except KeyNotFoundError:
            return None
        if not entry.value or entry.revision is None:
            return None
        return EndpointRecord.model_validate_json(entry.value), entry.revision
