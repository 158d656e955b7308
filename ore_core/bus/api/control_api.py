"""ControlAPI: the `ore` NATS micro service that manages threads (protocol.md "Control API").

Two surfaces. `P.api.NS.<method>` is what a conduit of namespace NS may call (NATS
permissions give it `P.api.NS.>` only): create, get, list and look up threads of NS and
read their stored events (`events.read`, the catch-up path, so conduits need no
JetStream API access). The namespace comes from the subject, never from the request;
a thread of another namespace is answered exactly like an unknown thread.
`P.admin.<method>` is for operators: every thread of every namespace, and the methods
that change or delete threads.

Every endpoint validates its JSON request with a small pydantic model and answers
with JSON. Failures are never a timeout: the reply carries micro's error headers
(`Nats-Service-Error-Code`, `Nats-Service-Error`) and the body
`{"error": {"code": ..., "message": ...}}`. Several workers may run a ControlAPI on
the same subjects: micro's queue group hands each request to one of them, and
lookups stay atomic because the store's `get_or_create_by` is. Every worker answers
alike: a request about one thread (get, turns, fork, meta, delete) that reaches a worker
not owning the thread is forwarded to its owner (`P.worker.<id>.…`), which answers from
its live stream or the store and announces changes; with no owner known, or none
answering, the worker answers from the store. No worker keeps a stream for a thread it
only created or looked up: the owner attaches it when its first message or change
arrives.

Concurrency: nats-py runs the handlers of one endpoint one after another on the
event loop that owns the connection and the Manager.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar

import structlog
from nats.aio.client import Client as NatsClient
from nats.micro import add_service
from nats.micro.request import Request
from nats.micro.service import Service
from pydantic import AfterValidator, BaseModel, Field, ValidationError

from ore_core import jsonutil
from ore_core._nats.codec import CORRUPT_THREAD, namespace_of
from ore_core._nats.connection import subscriptions_registered
from ore_core.bridge.admin import GATEWAY_KEY, LinkAdd, LinkAdmin
from ore_core.bridge.cache import LinkCache
from ore_core.bridge.deliveries import DeliveryGet, DeliveryLookup, DeliveryReport, MappingNotFound
from ore_core.bridge.links import LinkConflict, LinkError, LinkNotFound
from ore_core.bus.api.access import ThreadAccess
from ore_core.bus.api.api_base import ApiFailure, RawReply, Reply, RequestBody, ThreadId
from ore_core.bus.api.changes import ThreadChanges
from ore_core.bus.api.files import FileApi
from ore_core.bus.api.forwarding import Forwarding
from ore_core.bus.api.link_api import LinkApi
from ore_core.bus.api.model_offer import ModelOffer
from ore_core.bus.api.stored_reads import CursorRef, CursorSet, Read, StoredReads
from ore_core.endpoint import EndpointError
from ore_core.errors import (
    InvalidThreadId,
    SessionClosed,
    StaleThread,
    ThreadCorrupt,
    ThreadExists,
    ThreadNotFound,
    TurnNotFound,
)
from ore_core.files.links import LinkSettings
from ore_core.ledger.thread import Thread
from ore_core.session.manager import Manager
from ore_core.session.stream import Stream
from ore_core.subjects import (
    DEFAULT_NAMESPACE,
    NAMESPACE_KEY,
    Subjects,
    validate_namespace,
)
from ore_core.turn import turn_to_dict

__all__ = [
    "ADMIN_METHODS",
    "CONDUIT_METHODS",
    "DEFAULT_MAX_REQUEST_BYTES",
    "ERROR_CODES",
    "SERVICE_NAME",
    "ControlAPI",
]

SERVICE_NAME = "ore"
DEFAULT_MAX_REQUEST_BYTES = 256 * 1024  # metadata maps are small; anything bigger is a mistake
ERROR_CODES: Mapping[int, str] = {
    400: "bad_request",
    404: "not_found",
    409: "conflict",
    413: "too_large",
    500: "internal",
}
"""The word in the JSON error body for each numeric error code."""

log = structlog.get_logger("ore.bus.api")

CONDUIT_METHODS = (
    "threads.create",
    "threads.get",
    "threads.list",
    "threads.lookup",
    "threads.turns",
    "threads.fork",
    "threads.meta.set",
    "threads.meta.delete",
    "events.read",
    "cursors.get",
    "cursors.set",
    "health",
    "deliveries.report",
    "deliveries.lookup",
    "deliveries.get",
    "models",
)
"""Methods under `P.api.NS.`: a conduit's own threads (never deleting one)."""
ADMIN_METHODS = (
    "threads.create",
    "threads.get",
    "threads.list",
    "threads.lookup",
    "threads.fork",
    "threads.delete",
    "threads.meta.set",
    "threads.meta.delete",
    "threads.turns",
    "health",
    "links.add",
    "links.list",
    "links.lookup",
    "links.remove",
)
"""Methods under `P.admin.`: every namespace, and the changes only operators make."""

_LIST_SCAN = 1000  # ids one namespace-filtered list request looks at, at most

_M = TypeVar("_M", bound=BaseModel)


def _describe(thread: Thread) -> dict[str, Any]:
    return {
        "id": thread.id,
        "namespace": namespace_of(thread),
        "current_tip": thread.current_tip,
        "metadata": thread.meta().all(),
        "turns": len(thread),
    }


# --- requests ----------------------------------------------------------------------


_Key = Annotated[str, Field(min_length=1)]


_Namespace = Annotated[str, AfterValidator(validate_namespace)]


class _Create(RequestBody):
    id: ThreadId | None = None
    metadata: dict[str, str] = Field(default_factory=dict)


class _AdminCreate(_Create):
    namespace: _Namespace = DEFAULT_NAMESPACE


class _ThreadRef(RequestBody):
    id: ThreadId


class _List(RequestBody):
    after: ThreadId | None = None
    limit: int = Field(default=100, ge=1, le=1000)


class _AdminList(_List):
    namespace: _Namespace | None = None


class _Lookup(RequestBody):
    key: _Key
    value: str
    metadata: dict[str, str] = Field(default_factory=dict)


class _AdminLookup(_Lookup):
    namespace: _Namespace = DEFAULT_NAMESPACE
    create: bool = True
    """False: only find the thread (404 when there is none), as `ore chat --attach`
    asks before it makes a thread for a conversation no conduit has seen."""


class _Fork(_ThreadRef):
    turn_id: str  # "" starts a new root


class _MetaSet(_ThreadRef):
    key: _Key
    value: str


class _MetaDelete(_ThreadRef):
    key: _Key


class _Empty(RequestBody):
    pass


# --- failures ----------------------------------------------------------------------


def _validation_message(exc: ValidationError) -> str:
    problems = []
    for error in exc.errors(include_url=False, include_input=False):
        where = ".".join(str(part) for part in error["loc"])
        text = error["msg"].removeprefix("Value error, ")
        problems.append(f"{where}: {text}" if where else text)
    return "; ".join(problems)


def _classify(exc: Exception) -> ApiFailure:
    if isinstance(exc, ApiFailure):
        return exc
    if isinstance(exc, ValidationError):
        return ApiFailure(400, _validation_message(exc))
    if isinstance(exc, InvalidThreadId | EndpointError):
        return ApiFailure(400, str(exc))
    if isinstance(exc, LinkNotFound | MappingNotFound):
        return ApiFailure(404, str(exc))
    if isinstance(exc, LinkConflict | LinkError):
        return ApiFailure(409, str(exc))
    if isinstance(exc, ThreadNotFound | TurnNotFound):
        return ApiFailure(404, str(exc))
    if isinstance(exc, ThreadCorrupt):  # its message names the file: for the log only
        return ApiFailure(500, ThreadCorrupt.public_message(), code=CORRUPT_THREAD)
    if isinstance(exc, ThreadExists):
        return ApiFailure(409, str(exc))
    if isinstance(exc, SessionClosed | StaleThread):
        # Another writer (worker, `ore chat`) changed the thread meanwhile; the copy is
        # reloaded, so the same request succeeds when sent again.
        return ApiFailure(409, f"{exc}; retry the request")
    return ApiFailure(500, f"internal error: {type(exc).__name__}: {exc}")


_PATH = re.compile(r"(?<![\w/:.])/(?:[\w.@+-]+/)*[\w.@+-]+")


def _private(message: str, location: str) -> str:
    """`message` without the server's store location or file paths (logged in full).

    A client learns what went wrong with its request, not how the server's disk is laid
    out.
    """
    if location:
        message = message.replace(location, "the store")
    return _PATH.sub("<server path>", message)


def _one_line(text: str) -> str:
    # A NATS header value cannot hold a line break.
    return " ".join(text.split())


def _routed_thread(body: BaseModel) -> str | None:
    """The thread a request is about, answered by its owner worker (None: any worker)."""
    if isinstance(body, _ThreadRef):
        return body.id
    if isinstance(body, LinkAdd | DeliveryReport):  # they write the thread (metadata, events)
        return body.thread
    return None


def _check_conduit_key(key: str) -> None:
    """A conduit may not change the settings the core mirrors from a thread's links."""
    if key == GATEWAY_KEY or key.startswith(GATEWAY_KEY + "."):
        raise ApiFailure(
            400,
            f"key: {key} is set by the core from the thread's links (an operator's "
            "decision: `ore link`, [[gateway]] in ore.toml)",
        )


# --- the service -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Endpoint:
    name: str  # micro endpoint name (letters, digits, _ and -)
    subject: str
    handler: Callable[..., Awaitable[None]]  # (request, forwarded: bool = False)


class ControlAPI:
    """Serves `P.api.*.<method>`, `P.admin.<method>` over `nc` for `manager`.

    `version` must be a semantic version (micro requires it); `instance_metadata`
    shows up in `$SRV.PING/INFO.ore` replies so operators can tell workers apart.
    Requests bigger than `max_request_bytes` are answered with 413. `on_resolve(T, NS)`
    hears of every thread a conduit call resolves (the egress binds its subjects).
    `route(T)` names the worker that owns thread T when it is another one (None: answer
    here); requests forwarded to this worker arrive on `P.worker.<worker_id>.…`.
    `owns(T)` is true when this worker owns T: a change to an idle thread it owns is
    applied through the attached stream, so it is announced like any other.
    `links` (the core's link cache) makes the conduit methods reach linked threads;
    without it the admin link methods open `ORE_LINKS` themselves.
    `offer` answers `models` (default: the manager's processor, named `processor`).
    """

    def __init__(
        self,
        nc: NatsClient,
        manager: Manager,
        subjects: Subjects,
        *,
        version: str,
        instance_metadata: Mapping[str, str] | None = None,
        max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
        on_resolve: Callable[[str, str], object] | None = None,
        on_delete: Callable[[str], object] | None = None,
        route: Callable[[str], str | None] | None = None,
        owns: Callable[[str], bool] | None = None,
        worker_id: str | None = None,
        links: LinkCache | None = None,
        offer: ModelOffer | None = None,
        files_retention: float = 7 * 24 * 3600.0,
        file_links: LinkSettings | None = None,
    ) -> None:
        self._nc = nc
        self._offer = offer or ModelOffer(manager.processor, "processor")
        self._links = links
        self._manager = manager
        self._subjects = subjects
        self._version = version
        self._metadata = dict(instance_metadata or {})
        self._max_request_bytes = max_request_bytes
        self._on_resolve = on_resolve
        self._on_delete = on_delete
        self._namespace_at = subjects.prefix.count(".") + 2  # token index of NS in P.api.NS.m
        self._service: Service | None = None
        self._reads = StoredReads(nc, subjects)
        self._access = ThreadAccess(manager, links)
        self._changes = ThreadChanges(manager, owns)
        self._link_api = LinkApi(
            nc,
            manager,
            subjects,
            links,
            access=self._access,
            changes=self._changes,
            on_resolve=on_resolve,
        )
        self._route = route
        self._forwarding = Forwarding(nc, subjects, worker_id)
        self._files = FileApi(
            nc, subjects, self._access, manager.store, files_retention, file_links
        )

    @property
    def files(self) -> FileApi:
        """The file methods (and the sweep `ore serve` runs by itself)."""
        return self._files

    @property
    def endpoints(self) -> dict[str, str]:
        """Endpoint name -> subject, as announced in `$SRV.INFO.ore`."""
        return {e.name: e.subject for e in self._endpoints()}

    async def start(self) -> None:
        """Subscribe every endpoint (and micro's `$SRV` discovery subjects). Idempotent."""
        if self._service is not None:
            return
        service = await add_service(
            self._nc,
            name=SERVICE_NAME,
            version=self._version,
            description="ore control API: threads, events and health",
            metadata=self._metadata,
        )
        endpoints = self._endpoints()
        for endpoint in endpoints:
            await service.add_endpoint(
                name=endpoint.name, subject=endpoint.subject, handler=endpoint.handler
            )
        await self._forwarding.start([(e.subject, e.handler) for e in endpoints])
        # flush() alone does not prove the endpoints are live (see bus.barrier).
        await subscriptions_registered(self._nc)
        self._service = service

    async def stop(self) -> None:
        """Unsubscribe; requests in flight elsewhere go to the other workers. Idempotent."""
        service, self._service = self._service, None
        await self._forwarding.stop()
        if service is not None:
            await service.stop()

    async def __aenter__(self) -> ControlAPI:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    def _endpoints(self) -> list[_Endpoint]:
        def conduit(model: type[_M], handler: Callable[[_M, str], Awaitable[Reply]]) -> Any:
            async def endpoint(request: Request, forwarded: bool = False) -> None:
                namespace = request.subject.split(".")[self._namespace_at]

                async def call(body: _M) -> Reply:
                    return await handler(body, namespace)

                await self._serve(request, model, call, forwarded)

            return endpoint

        def admin(model: type[_M], handler: Callable[[_M], Awaitable[Reply]]) -> Any:
            async def endpoint(request: Request, forwarded: bool = False) -> None:
                await self._serve(request, model, handler, forwarded)

            return endpoint

        # (method, request model, handler): the micro endpoint is named for the method.
        conduit_methods: list[tuple[str, type[Any], Callable[[Any, str], Awaitable[Reply]]]] = [
            ("threads.create", _Create, self._create),
            ("threads.get", _ThreadRef, self._get),
            ("threads.list", _List, self._list),
            ("threads.lookup", _Lookup, self._lookup),
            ("threads.turns", _ThreadRef, self._own_turns),
            ("threads.fork", _Fork, self._own_fork),
            ("threads.meta.set", _MetaSet, self._own_meta_set),
            ("threads.meta.delete", _MetaDelete, self._own_meta_delete),
            ("events.read", Read, self._read),
            ("cursors.get", CursorRef, self._reads.cursor_get),
            ("cursors.set", CursorSet, self._reads.cursor_set),
            ("health", _Empty, self._ns_health),
            ("deliveries.report", DeliveryReport, self._link_api.delivery_report),
            ("deliveries.lookup", DeliveryLookup, self._link_api.delivery_lookup),
            ("deliveries.get", DeliveryGet, self._link_api.delivery_get),
            ("models", _Empty, self._models),
            *self._files.conduit_methods(),
        ]
        admin_methods: list[tuple[str, type[Any], Callable[[Any], Awaitable[Reply]]]] = [
            ("threads.create", _AdminCreate, self._admin_create),
            ("threads.get", _ThreadRef, self._admin_get),
            ("threads.list", _AdminList, self._admin_list),
            ("threads.lookup", _AdminLookup, self._admin_lookup),
            ("threads.fork", _Fork, self._fork),
            ("threads.delete", _ThreadRef, self._delete),
            ("threads.meta.set", _MetaSet, self._meta_set),
            ("threads.meta.delete", _MetaDelete, self._meta_delete),
            ("threads.turns", _ThreadRef, self._turns),
            ("health", _Empty, self._health),
            *self._link_api.admin_methods(),
            *self._files.admin_methods(),
        ]
        api, adm = self._subjects.api, self._subjects.admin
        return [
            *(
                _Endpoint(method.replace(".", "_"), api("*", method), conduit(model, call))
                for method, model, call in conduit_methods
            ),
            *(
                _Endpoint(f"admin_{method.replace('.', '_')}", adm(method), admin(model, call))
                for method, model, call in admin_methods
            ),
        ]

    async def _serve(
        self,
        request: Request,
        model: type[_M],
        handler: Callable[[_M], Awaitable[Reply]],
        forwarded: bool = False,
    ) -> None:
        try:
            if len(request.data) > self._max_request_bytes:
                raise ApiFailure(
                    413,
                    f"request of {len(request.data)} bytes exceeds the limit of "
                    f"{self._max_request_bytes} bytes",
                )
            body = model.model_validate_json(request.data or b"{}")
            routed = _routed_thread(body)
            if not forwarded and routed is not None and self._route is not None:
                owner = self._route(routed)
                if owner is not None and await self._forwarding.forward(request, owner):
                    return
            answer = await handler(body)
            reply = answer.encode() if isinstance(answer, RawReply) else jsonutil.dumps(answer)
            if len(reply) > self._nc.max_payload:
                raise ApiFailure(
                    413,
                    f"reply of {len(reply)} bytes exceeds the NATS max_payload of "
                    f"{self._nc.max_payload} bytes",
                )
        except Exception as exc:
            await self._fail(request, _classify(exc), exc)
            return
        await request.respond(reply)

    async def _fail(self, request: Request, failure: ApiFailure, cause: Exception) -> None:
        message = _one_line(failure.message)
        if failure.status >= 500:
            log.error(
                "control API request failed",
                subject=request.subject,
                error=_one_line(str(cause)) if isinstance(cause, ThreadCorrupt) else message,
                exc_info=cause,
            )
        message = _private(message, getattr(self._manager.store, "location", ""))
        code = failure.code or ERROR_CODES[failure.status]
        body = jsonutil.dumps({"error": {"code": code, "message": message}})
        await request.respond_error(str(failure.status), message, data=body)

    # -- conduit handlers (namespace from the subject) -------------------------

    def _resolved(self, thread_id: str, namespace: str) -> None:
        if self._on_resolve is not None:
            self._on_resolve(thread_id, namespace)

    @staticmethod
    def _with_namespace(metadata: Mapping[str, str], namespace: str) -> dict[str, str]:
        claimed = metadata.get(NAMESPACE_KEY, namespace)
        if claimed != namespace:
            raise ApiFailure(
                400,
                f"metadata.{NAMESPACE_KEY}: the namespace is {namespace!r} (the caller's) "
                "and cannot be set to another",
            )
        return {**metadata, NAMESPACE_KEY: namespace}

    async def _create(self, body: _Create, namespace: str) -> Reply:
        metadata = self._with_namespace(body.metadata, namespace)
        try:
            thread = await self._manager.create_thread(metadata, body.id)
        except ThreadExists:
            if body.id is not None:
                await self._access.own_thread(body.id, namespace, unusable=True)
            raise
        self._resolved(thread.id, namespace)
        return {"id": thread.id, "created": True}

    async def _get(self, body: _ThreadRef, namespace: str) -> Reply:
        thread = await self._access.own_thread(body.id, namespace)
        described = _describe(thread)
        view = await self._link_api.endpoint_view(namespace, thread.id, namespace_of(thread))
        described["metadata"] = {**view, **described["metadata"]}  # stored keys win
        return described

    async def _list(self, body: _List, namespace: str) -> Reply:
        return await self._list_in(body.after, body.limit, namespace)

    async def _lookup(self, body: _Lookup, namespace: str) -> Reply:
        if not body.key.startswith(namespace + "."):
            raise ApiFailure(
                400,
                f"key: lookup keys of namespace {namespace} start with '{namespace}.' "
                f"(e.g. '{namespace}.channel'), got {body.key!r}",
            )
        linked = await self._link_api.linked_endpoint(namespace, body.key, body.value)
        if linked is not None:
            return {"id": linked, "created": False}
        metadata = self._with_namespace(body.metadata, namespace)
        thread, created = await self._manager.lookup_thread(body.key, body.value, metadata)
        if namespace_of(thread) != namespace:  # an operator made it for another
            raise ApiFailure(404, f"no thread with {body.key}={body.value!r} in {namespace}")
        self._resolved(thread.id, namespace)
        return {"id": thread.id, "created": created}

    async def _own_turns(self, body: _ThreadRef, namespace: str) -> Reply:
        thread = await self._access.own_thread(body.id, namespace)
        return {"id": thread.id, "turns": [turn_to_dict(turn) for turn in thread.turns()]}

    async def _own_fork(self, body: _Fork, namespace: str) -> Reply:
        await self._access.own_thread(body.id, namespace)
        return await self._fork(body)

    async def _own_meta_set(self, body: _MetaSet, namespace: str) -> Reply:
        _check_conduit_key(body.key)
        await self._access.own_thread(body.id, namespace)
        return await self._meta_set(body)

    async def _own_meta_delete(self, body: _MetaDelete, namespace: str) -> Reply:
        _check_conduit_key(body.key)
        await self._access.own_thread(body.id, namespace)
        return await self._meta_delete(body)

    async def _read(self, body: Read, namespace: str) -> Reply:
        """`events.read`: the namespace's own subjects and those links show it."""
        return await self._reads.read(
            body, await self._link_api.read_subjects(namespace, body.thread)
        )

    async def link_admin(self) -> LinkAdmin:
        """The handlers of the admin link methods (`ore serve` applies gateways with them)."""
        return await self._link_api.admin()

    async def _ns_health(self, body: _Empty, namespace: str) -> Reply:
        return await self._health(body)

    async def _models(self, body: _Empty, namespace: str) -> Reply:
        """What answers on this worker and the models its processor offers (the picker);
        a model server that could not be asked is told in the answer and logged here."""
        described = await self._offer.describe()
        if "error" in described:
            log.warning("processor could not list its models", error=described["error"])
        return described

    # -- admin handlers (every namespace) -----------------------------------------

    async def _admin_create(self, body: _AdminCreate) -> Reply:
        return await self._create(_Create(id=body.id, metadata=body.metadata), body.namespace)

    async def _admin_get(self, body: _ThreadRef) -> Reply:
        return _describe(await self._manager.get_thread(body.id))

    async def _admin_list(self, body: _AdminList) -> Reply:
        if body.namespace is not None:
            return await self._list_in(body.after, body.limit, body.namespace)
        # One id more than asked tells whether another page follows.
        ids = await self._manager.store.list_ids(after=body.after or "", limit=body.limit + 1)
        page = ids[: body.limit]
        return {"threads": page, "next": page[-1] if len(ids) > body.limit else None}

    async def _admin_lookup(self, body: _AdminLookup) -> Reply:
        if not body.create:
            found = await self._manager.store.get_by(body.key, body.value)
            return {"id": found.id, "created": False}
        metadata = {NAMESPACE_KEY: body.namespace, **body.metadata}
        thread, created = await self._manager.lookup_thread(body.key, body.value, metadata)
        self._resolved(thread.id, namespace_of(thread))
        return {"id": thread.id, "created": created}

    async def _list_in(self, after: str | None, limit: int, namespace: str) -> Reply:
        """Thread ids of `namespace` after `after`, looking at `_LIST_SCAN` ids at most.

        A page may hold fewer than `limit` ids (even none) while `next` is not null:
        the scan stopped, ask again from `next`.
        """
        ids = await self._manager.store.list_ids(after=after or "", limit=_LIST_SCAN + 1)
        scan = ids[:_LIST_SCAN]
        page: list[str] = []
        for thread_id in scan:
            if len(page) == limit:
                return {"threads": page, "next": page[-1]}
            try:
                thread = await self._manager.get_thread(thread_id)
            except ThreadNotFound:
                continue
            if namespace_of(thread) == namespace:
                page.append(thread_id)
        return {"threads": page, "next": scan[-1] if len(ids) > _LIST_SCAN else None}

    async def _fork(self, body: _Fork) -> Reply:
        async def live(stream: Stream) -> None:
            if stream.busy:
                raise ApiFailure(
                    409,
                    f"thread {stream.id} is answering a message; "
                    "interrupt it or wait for lifecycle done, then fork",
                )
            stream.state().fork(body.turn_id)
            await stream.save()

        thread = await self._changes.apply(body.id, live, lambda thread: thread.fork(body.turn_id))
        return {"id": thread.id, "current_tip": thread.current_tip}

    async def _delete(self, body: _ThreadRef) -> Reply:
        deleted = await self._manager.delete_thread(body.id)
        if self._links is not None:  # its id may come back: its links must not reach it
            await self._links.store.unlink_thread(body.id)
        if self._on_delete is not None:
            self._on_delete(body.id)
        return {"id": body.id, "deleted": deleted}

    async def _meta_set(self, body: _MetaSet) -> Reply:
        thread = await self._changes.set_metadata(body.id, body.key, body.value)
        return {"id": thread.id, "metadata": thread.meta().all()}

    async def _meta_delete(self, body: _MetaDelete) -> Reply:
        thread = await self._changes.delete_metadata(body.id, body.key)
        return {"id": thread.id, "metadata": thread.meta().all()}

    async def _turns(self, body: _ThreadRef) -> Reply:
        thread = await self._manager.get_thread(body.id)
        return {"id": thread.id, "turns": [turn_to_dict(turn) for turn in thread.turns()]}

    async def _health(self, body: _Empty) -> Reply:
        return {"status": "ok", "version": self._version, "streams": len(self._manager.list())}
