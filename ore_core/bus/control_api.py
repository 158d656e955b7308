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
only created or looked up: the owner attaches it when its first message arrives.

Concurrency: nats-py runs the handlers of one endpoint one after another on the
event loop that owns the connection and the Manager.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar

import structlog
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.errors import Error as NatsError
from nats.errors import NoRespondersError
from nats.js.api import RawStreamMsg
from nats.js.errors import BucketNotFoundError, KeyNotFoundError, NotFoundError
from nats.js.kv import KeyValue
from nats.micro import add_service
from nats.micro.request import Request
from nats.micro.service import Service
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from ore_core import jsonutil
from ore_core._nats.codec import namespace_of
from ore_core._nats.connection import subscriptions_registered
from ore_core.bridge.admin import GATEWAY_KEY, LinkAdd, LinkAdmin, LinkList, LinkRef
from ore_core.bridge.cache import LinkCache
from ore_core.bridge.deliveries import (
    DeliveryGet,
    DeliveryLookup,
    DeliveryMap,
    DeliveryReport,
    MappingNotFound,
)
from ore_core.bridge.links import LinkConflict, LinkError, LinkNotFound, LinkStore
from ore_core.endpoint import Endpoint, EndpointError
from ore_core.errors import (
    InvalidThreadId,
    SessionClosed,
    SessionNotFound,
    StaleThread,
    ThreadExists,
    ThreadNotFound,
    TurnNotFound,
)
from ore_core.events import DeliveryEvent, EventContext
from ore_core.ids import validate_thread_id
from ore_core.ledger.thread import Thread
from ore_core.session.manager import Manager
from ore_core.session.stream import Stream
from ore_core.subjects import (
    DEFAULT_NAMESPACE,
    HEADER_KIND,
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

_FORWARD_TIMEOUT = 5.0  # seconds an owner has to answer a forwarded request
_LIST_SCAN = 1000  # ids one namespace-filtered list request looks at, at most
_READ_HEADROOM = 1024  # bytes kept free in an events.read reply for its envelope

_M = TypeVar("_M", bound=BaseModel)


@dataclass(frozen=True, slots=True)
class _Raw:
    """An events.read reply: stored payloads spliced in as they are, never re-encoded."""

    entries: list[bytes]
    next: int | None

    def encode(self) -> bytes:
        following = b"null" if self.next is None else str(self.next).encode()
        return b'{"events":[' + b",".join(self.entries) + b'],"next":' + following + b"}"


_Reply = dict[str, Any] | _Raw


def _describe(thread: Thread) -> dict[str, Any]:
    return {
        "id": thread.id,
        "namespace": namespace_of(thread),
        "current_tip": thread.current_tip,
        "metadata": thread.meta().all(),
        "turns": len(thread),
    }


# --- requests ----------------------------------------------------------------------


class _Body(BaseModel):
    """Requests are strict: unknown fields are typos and answered with 400."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


_ThreadId = Annotated[str, AfterValidator(validate_thread_id)]
_Key = Annotated[str, Field(min_length=1)]


_Namespace = Annotated[str, AfterValidator(validate_namespace)]


class _Create(_Body):
    id: _ThreadId | None = None
    metadata: dict[str, str] = Field(default_factory=dict)


class _AdminCreate(_Create):
    namespace: _Namespace = DEFAULT_NAMESPACE


class _ThreadRef(_Body):
    id: _ThreadId


class _List(_Body):
    after: _ThreadId | None = None
    limit: int = Field(default=100, ge=1, le=1000)


class _AdminList(_List):
    namespace: _Namespace | None = None


class _Lookup(_Body):
    key: _Key
    value: str
    metadata: dict[str, str] = Field(default_factory=dict)


class _AdminLookup(_Lookup):
    namespace: _Namespace = DEFAULT_NAMESPACE


_Cursor = Annotated[str, Field(pattern=r"^[A-Za-z0-9-]{1,64}(_[A-Za-z0-9_-]{1,128})?$")]


class _CursorRef(_Body):
    name: _Cursor


class _CursorSet(_CursorRef):
    sequence: int = Field(ge=0)


class _Read(_Body):
    thread: _ThreadId | None = None
    after: int = Field(default=0, ge=0)
    limit: int = Field(default=100, ge=0, le=1000)


class _Fork(_ThreadRef):
    turn_id: str  # "" starts a new root


class _MetaSet(_ThreadRef):
    key: _Key
    value: str


class _MetaDelete(_ThreadRef):
    key: _Key


class _Empty(_Body):
    pass


# --- failures ----------------------------------------------------------------------


class _Failure(Exception):
    """An error reply: the numeric code and a one-line message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _validation_message(exc: ValidationError) -> str:
    problems = []
    for error in exc.errors(include_url=False, include_input=False):
        where = ".".join(str(part) for part in error["loc"])
        text = error["msg"].removeprefix("Value error, ")
        problems.append(f"{where}: {text}" if where else text)
    return "; ".join(problems)


def _classify(exc: Exception) -> _Failure:
    if isinstance(exc, _Failure):
        return exc
    if isinstance(exc, ValidationError):
        return _Failure(400, _validation_message(exc))
    if isinstance(exc, InvalidThreadId | EndpointError):
        return _Failure(400, str(exc))
    if isinstance(exc, LinkNotFound | MappingNotFound):
        return _Failure(404, str(exc))
    if isinstance(exc, LinkConflict | LinkError):
        return _Failure(409, str(exc))
    if isinstance(exc, ThreadNotFound | TurnNotFound):
        return _Failure(404, str(exc))
    if isinstance(exc, ThreadExists):
        return _Failure(409, str(exc))
    if isinstance(exc, SessionClosed | StaleThread):
        # Another writer (worker, `ore chat`) changed the thread meanwhile; the copy is
        # reloaded, so the same request succeeds when sent again.
        return _Failure(409, f"{exc}; retry the request")
    return _Failure(500, f"internal error: {type(exc).__name__}: {exc}")


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
        raise _Failure(
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
    `links` (the core's link cache) makes the conduit methods reach linked threads;
    without it the admin link methods open `ORE_LINKS` themselves.
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
        worker_id: str | None = None,
        links: LinkCache | None = None,
    ) -> None:
        self._nc = nc
        self._links = links
        self._link_admin: LinkAdmin | None = None
        self._js = nc.jetstream()
        self._manager = manager
        self._subjects = subjects
        self._version = version
        self._metadata = dict(instance_metadata or {})
        self._max_request_bytes = max_request_bytes
        self._on_resolve = on_resolve
        self._on_delete = on_delete
        self._namespace_at = subjects.prefix.count(".") + 2  # token index of NS in P.api.NS.m
        self._service: Service | None = None
        self._kv: KeyValue | None = None
        self._route = route
        self._worker = None if worker_id is None else subjects.worker(worker_id)
        self._forwarded: Subscription | None = None

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
        if self._worker is not None:
            self._forwarded = await self._nc.subscribe(
                self._worker + ".>", cb=functools.partial(self._on_forwarded, endpoints)
            )
        # flush() alone does not prove the endpoints are live (see bus.barrier).
        await subscriptions_registered(self._nc)
        self._service = service

    async def stop(self) -> None:
        """Unsubscribe; requests in flight elsewhere go to the other workers. Idempotent."""
        service, self._service = self._service, None
        forwarded, self._forwarded = self._forwarded, None
        if forwarded is not None:
            await forwarded.unsubscribe()
        if service is not None:
            await service.stop()

    async def __aenter__(self) -> ControlAPI:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    def _endpoints(self) -> list[_Endpoint]:
        def conduit(model: type[_M], handler: Callable[[_M, str], Awaitable[_Reply]]) -> Any:
            async def endpoint(request: Request, forwarded: bool = False) -> None:
                namespace = request.subject.split(".")[self._namespace_at]

                async def call(body: _M) -> _Reply:
                    return await handler(body, namespace)

                await self._serve(request, model, call, forwarded)

            return endpoint

        def admin(model: type[_M], handler: Callable[[_M], Awaitable[_Reply]]) -> Any:
            async def endpoint(request: Request, forwarded: bool = False) -> None:
                await self._serve(request, model, handler, forwarded)

            return endpoint

        api, adm = self._subjects.api, self._subjects.admin
        return [
            _Endpoint("threads_create", api("*", "threads.create"), conduit(_Create, self._create)),
            _Endpoint("threads_get", api("*", "threads.get"), conduit(_ThreadRef, self._get)),
            _Endpoint("threads_list", api("*", "threads.list"), conduit(_List, self._list)),
            _Endpoint("threads_lookup", api("*", "threads.lookup"), conduit(_Lookup, self._lookup)),
            _Endpoint(
                "threads_turns", api("*", "threads.turns"), conduit(_ThreadRef, self._own_turns)
            ),
            _Endpoint("threads_fork", api("*", "threads.fork"), conduit(_Fork, self._own_fork)),
            _Endpoint(
                "threads_meta_set",
                api("*", "threads.meta.set"),
                conduit(_MetaSet, self._own_meta_set),
            ),
            _Endpoint(
                "threads_meta_delete",
                api("*", "threads.meta.delete"),
                conduit(_MetaDelete, self._own_meta_delete),
            ),
            _Endpoint("events_read", api("*", "events.read"), conduit(_Read, self._read)),
            _Endpoint(
                "cursors_get", api("*", "cursors.get"), conduit(_CursorRef, self._cursor_get)
            ),
            _Endpoint(
                "cursors_set", api("*", "cursors.set"), conduit(_CursorSet, self._cursor_set)
            ),
            _Endpoint("health", api("*", "health"), conduit(_Empty, self._ns_health)),
            _Endpoint(
                "deliveries_report",
                api("*", "deliveries.report"),
                conduit(DeliveryReport, self._delivery_report),
            ),
            _Endpoint(
                "deliveries_lookup",
                api("*", "deliveries.lookup"),
                conduit(DeliveryLookup, self._delivery_lookup),
            ),
            _Endpoint(
                "deliveries_get",
                api("*", "deliveries.get"),
                conduit(DeliveryGet, self._delivery_get),
            ),
            _Endpoint(
                "admin_threads_create",
                adm("threads.create"),
                admin(_AdminCreate, self._admin_create),
            ),
            _Endpoint("admin_threads_get", adm("threads.get"), admin(_ThreadRef, self._admin_get)),
            _Endpoint(
                "admin_threads_list", adm("threads.list"), admin(_AdminList, self._admin_list)
            ),
            _Endpoint(
                "admin_threads_lookup",
                adm("threads.lookup"),
                admin(_AdminLookup, self._admin_lookup),
            ),
            _Endpoint("admin_threads_fork", adm("threads.fork"), admin(_Fork, self._fork)),
            _Endpoint(
                "admin_threads_delete", adm("threads.delete"), admin(_ThreadRef, self._delete)
            ),
            _Endpoint(
                "admin_threads_meta_set", adm("threads.meta.set"), admin(_MetaSet, self._meta_set)
            ),
            _Endpoint(
                "admin_threads_meta_delete",
                adm("threads.meta.delete"),
                admin(_MetaDelete, self._meta_delete),
            ),
            _Endpoint("admin_threads_turns", adm("threads.turns"), admin(_ThreadRef, self._turns)),
            _Endpoint("admin_health", adm("health"), admin(_Empty, self._health)),
            *(
                _Endpoint(f"admin_{method.replace('.', '_')}", adm(method), admin(model, call))
                for method, model, call in self._link_methods()
            ),
        ]

    async def _serve(
        self,
        request: Request,
        model: type[_M],
        handler: Callable[[_M], Awaitable[_Reply]],
        forwarded: bool = False,
    ) -> None:
        try:
            if len(request.data) > self._max_request_bytes:
                raise _Failure(
                    413,
                    f"request of {len(request.data)} bytes exceeds the limit of "
                    f"{self._max_request_bytes} bytes",
                )
            body = model.model_validate_json(request.data or b"{}")
            routed = _routed_thread(body)
            if not forwarded and routed is not None and self._route is not None:
                owner = self._route(routed)
                if owner is not None and await self._forward(request, owner):
                    return
            answer = await handler(body)
            reply = answer.encode() if isinstance(answer, _Raw) else jsonutil.dumps(answer)
            if len(reply) > self._nc.max_payload:
                raise _Failure(
                    413,
                    f"reply of {len(reply)} bytes exceeds the NATS max_payload of "
                    f"{self._nc.max_payload} bytes",
                )
        except Exception as exc:
            await self._fail(request, _classify(exc), exc)
            return
        await request.respond(reply)

    async def _forward(self, request: Request, owner: str) -> bool:
        """Relay `request` to worker `owner` and its reply back; False when it did not
        answer (gone, or too slow): the caller then answers from the store."""
        prefix = self._subjects.prefix
        subject = self._subjects.worker(owner) + request.subject[len(prefix) :]
        try:
            reply = await self._nc.request(
                subject, request.data, timeout=_FORWARD_TIMEOUT, headers=request.headers
            )
        except (NatsError, TimeoutError) as exc:
            log.debug("owner did not answer; answering here", owner=owner, error=repr(exc))
            return False
        await request.respond(reply.data, headers=reply.headers)
        return True

    async def _on_forwarded(self, endpoints: list[_Endpoint], msg: Msg) -> None:
        """A request another worker forwarded here (this worker owns its thread): served
        by the endpoint of its original subject, never forwarded again."""
        assert self._worker is not None
        subject = self._subjects.prefix + msg.subject[len(self._worker) :]
        tokens = subject.split(".")
        for endpoint in endpoints:
            pattern = endpoint.subject.split(".")
            if len(pattern) == len(tokens) and all(
                p in ("*", t) for p, t in zip(pattern, tokens, strict=True)
            ):
                original = Msg(
                    self._nc, subject=subject, reply=msg.reply, data=msg.data, headers=msg.headers
                )
                await endpoint.handler(Request(original), True)
                return

    async def _fail(self, request: Request, failure: _Failure, cause: Exception) -> None:
        message = _one_line(failure.message)
        if failure.status >= 500:
            log.error(
                "control API request failed",
                subject=request.subject,
                error=message,
                exc_info=cause,
            )
        message = _private(message, getattr(self._manager.store, "location", ""))
        code = ERROR_CODES[failure.status]
        body = jsonutil.dumps({"error": {"code": code, "message": message}})
        await request.respond_error(str(failure.status), message, data=body)

    # -- conduit handlers (namespace from the subject) -------------------------

    def _resolved(self, thread_id: str, namespace: str) -> None:
        if self._on_resolve is not None:
            self._on_resolve(thread_id, namespace)

    async def _own_thread(
        self, thread_id: str, namespace: str, *, unusable: bool = False
    ) -> Thread:
        """The thread if it belongs to `namespace`; else the same 404 as an unknown one.

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
            and await self._linked(namespace, thread_id)
        ):
            return thread  # another's thread, reached through a link
        if thread is None or namespace_of(thread) != namespace:
            if unusable:
                raise _Failure(
                    409,
                    f"thread id {thread_id} cannot be used in namespace {namespace}: pick another",
                )
            raise _Failure(404, f"thread {thread_id} not found in namespace {namespace}")
        return thread

    @staticmethod
    def _with_namespace(metadata: Mapping[str, str], namespace: str) -> dict[str, str]:
        claimed = metadata.get(NAMESPACE_KEY, namespace)
        if claimed != namespace:
            raise _Failure(
                400,
                f"metadata.{NAMESPACE_KEY}: the namespace is {namespace!r} (the caller's) "
                "and cannot be set to another",
            )
        return {**metadata, NAMESPACE_KEY: namespace}

    async def _create(self, body: _Create, namespace: str) -> _Reply:
        metadata = self._with_namespace(body.metadata, namespace)
        try:
            thread = await self._manager.create_thread(metadata, body.id)
        except ThreadExists:
            if body.id is not None:
                await self._own_thread(body.id, namespace, unusable=True)
            raise
        self._resolved(thread.id, namespace)
        return {"id": thread.id, "created": True}

    async def _get(self, body: _ThreadRef, namespace: str) -> _Reply:
        return _describe(await self._own_thread(body.id, namespace))

    async def _list(self, body: _List, namespace: str) -> _Reply:
        return await self._list_in(body.after, body.limit, namespace)

    async def _lookup(self, body: _Lookup, namespace: str) -> _Reply:
        if not body.key.startswith(namespace + "."):
            raise _Failure(
                400,
                f"key: lookup keys of namespace {namespace} start with '{namespace}.' "
                f"(e.g. '{namespace}.channel'), got {body.key!r}",
            )
        linked = await self._linked_endpoint(namespace, body.key, body.value)
        if linked is not None:
            return {"id": linked, "created": False}
        metadata = self._with_namespace(body.metadata, namespace)
        thread, created = await self._manager.lookup_thread(body.key, body.value, metadata)
        if namespace_of(thread) != namespace:  # an operator made it for another
            raise _Failure(404, f"no thread with {body.key}={body.value!r} in {namespace}")
        self._resolved(thread.id, namespace)
        return {"id": thread.id, "created": created}

    async def _own_turns(self, body: _ThreadRef, namespace: str) -> _Reply:
        thread = await self._own_thread(body.id, namespace)
        return {"id": thread.id, "turns": [turn_to_dict(turn) for turn in thread.turns()]}

    async def _own_fork(self, body: _Fork, namespace: str) -> _Reply:
        await self._own_thread(body.id, namespace)
        return await self._fork(body)

    async def _own_meta_set(self, body: _MetaSet, namespace: str) -> _Reply:
        _check_conduit_key(body.key)
        await self._own_thread(body.id, namespace)
        return await self._meta_set(body)

    async def _own_meta_delete(self, body: _MetaDelete, namespace: str) -> _Reply:
        _check_conduit_key(body.key)
        await self._own_thread(body.id, namespace)
        return await self._meta_delete(body)

    async def _read(self, body: _Read, namespace: str) -> _Reply:
        """Stored events of one thread (or of every thread) of `namespace` after a sequence.

        The subject `P.ev.NS.T` holds only what was written while T was in NS, so the
        filter alone keeps other namespaces out: a foreign thread reads as empty, as an
        unknown one does. The reply splices each stored payload in as it is (no
        re-serialisation) and stops before the reply would exceed `max_payload`.
        """
        subjects = self._subjects
        read = (
            [subjects.events_wildcard_of(namespace), *self._linked_subjects(namespace)]
            if body.thread is None
            else [subjects.events(await self._home_shown(namespace, body.thread), body.thread)]
        )
        stream = subjects.events_stream
        try:
            return await self._read_stored(stream, read, body)
        except NoRespondersError:
            raise _Failure(
                500, f"stream {stream} does not exist: start `ore serve` to create it"
            ) from None

    # -- links (ore_core/bridge) ----------------------------------------------------

    async def _linked(self, namespace: str, thread_id: str) -> bool:
        """Whether a link lets `namespace` reach `thread_id` (another's thread)."""
        return self._links is not None and await self._links.reaches(namespace, thread_id)

    async def _linked_endpoint(self, namespace: str, key: str, value: str) -> str | None:
        """The thread a conduit's lookup key is linked to, if any (asked first)."""
        if self._links is None:
            return None
        try:
            endpoint = Endpoint(namespace, key, value)
        except EndpointError:  # not a linkable key (an empty value, say): never linked
            return None
        return await self._links.lookup(endpoint)

    async def _home_shown(self, namespace: str, thread_id: str) -> str:
        """The namespace whose events subject `namespace` reads for `thread_id`: the
        thread's home when a link shows it to `namespace`, else `namespace` itself."""
        if self._links is None:
            return namespace
        return await self._links.shows(namespace, thread_id) or namespace

    def _linked_subjects(self, namespace: str) -> list[str]:
        """The events subjects of the other namespaces' threads shown to `namespace`."""
        if self._links is None:
            return []
        events = self._subjects.events
        return [events(home, thread) for thread, home in self._links.linked_threads(namespace)]

    def _link_methods(self) -> list[tuple[str, type[Any], Callable[[Any], Awaitable[_Reply]]]]:
        async def call(name: str, body: Any) -> _Reply:
            handler: Callable[[Any], Awaitable[_Reply]] = getattr(await self._link_api(), name)
            return await handler(body)

        def method(name: str) -> Callable[[Any], Awaitable[_Reply]]:
            return lambda body: call(name, body)

        return [
            ("links.add", LinkAdd, method("add")),
            ("links.list", LinkList, method("list")),
            ("links.lookup", LinkRef, method("lookup")),
            ("links.remove", LinkRef, method("remove")),
        ]

    async def _delivery_report(self, body: DeliveryReport, namespace: str) -> _Reply:
        """Record a delivered copy's platform ids, or store a `delivery` event on the
        thread for a copy that is retrying or failed (bridging.md "Delivery status")."""
        thread = await self._own_thread(body.thread, namespace)
        if body.status == "delivered":
            if body.platform_ids:
                deliveries = DeliveryMap((await self._link_store()).kv)
                await deliveries.record(namespace, thread.id, body.turn, body.platform_ids)
            return {"recorded": True}
        self._resolved(thread.id, namespace_of(thread))
        stream = await self._manager.attach(thread.id)
        await stream.emit(
            DeliveryEvent(
                turn=body.turn,
                endpoint=namespace,
                status=body.status,
                detail=body.detail,
                context=EventContext(provenance=namespace),
            )
        )
        return {"recorded": True}

    async def _delivery_lookup(self, body: DeliveryLookup, namespace: str) -> _Reply:
        deliveries = DeliveryMap((await self._link_store()).kv)
        return await deliveries.turn_of(namespace, body.platform_id)

    async def _delivery_get(self, body: DeliveryGet, namespace: str) -> _Reply:
        await self._own_thread(body.thread, namespace)
        deliveries = DeliveryMap((await self._link_store()).kv)
        return {"platform_ids": await deliveries.platform_ids(namespace, body.thread, body.turn)}

    async def _link_store(self) -> LinkStore:
        """The link records: the core's cache's store, else `ORE_LINKS` opened here."""
        if self._links is not None:
            return self._links.store
        try:
            return LinkStore(await self._js.key_value(self._subjects.links_bucket))
        except (NotFoundError, BucketNotFoundError):
            raise _Failure(
                500, f"KV bucket {self._subjects.links_bucket} missing: restart the core"
            ) from None

    async def link_admin(self) -> LinkAdmin:
        """The handlers of the admin link methods (`ore serve` applies gateways with them)."""
        return await self._link_api()

    async def _link_api(self) -> LinkAdmin:
        if self._link_admin is None:
            store = await self._link_store()

            async def home_of(thread_id: str) -> str:
                return namespace_of(await self._manager.get_thread(thread_id))

            async def metadata(thread_id: str) -> dict[str, str]:
                return (await self._manager.get_thread(thread_id)).meta().all()

            async def set_metadata(thread_id: str, key: str, value: str) -> object:
                return await self._meta_set(_MetaSet(id=thread_id, key=key, value=value))

            async def delete_metadata(thread_id: str, key: str) -> object:
                return await self._meta_delete(_MetaDelete(id=thread_id, key=key))

            self._link_admin = LinkAdmin(
                store,
                home_of=home_of,
                metadata=metadata,
                set_metadata=set_metadata,
                delete_metadata=delete_metadata,
            )
        return self._link_admin

    async def _read_stored(self, stream: str, read: list[str], body: _Read) -> _Reply:
        """The stored messages on the subjects `read` after `body.after`, merged in
        sequence order (one subject but for a namespace with linked threads)."""
        subjects = self._subjects
        if body.limit == 0:
            last = max([await self._last(stream, subject) for subject in read])
            return {"events": [], "next": None, "last": last}
        entries: list[bytes] = []
        size = _READ_HEADROOM
        sequence = body.after
        more = False
        heads = {subject: await self._next_stored(stream, subject, sequence) for subject in read}
        while len(entries) < body.limit:
            waiting = [(subject, raw) for subject, raw in heads.items() if raw is not None]
            if not waiting:
                break
            subject, raw = min(waiting, key=lambda head: int(head[1].seq or 0))
            found = int(raw.seq or 0)
            _, thread_id = subjects.thread_of(str(raw.subject))
            kind = (raw.headers or {}).get(HEADER_KIND, "")
            entry = (
                b'{"thread":'
                + jsonutil.dumps(thread_id)
                + b',"sequence":'
                + str(found).encode()
                + b',"kind":'
                + jsonutil.dumps(kind)
                + b',"event":'
                + (raw.data or b"null")
                + b"}"
            )
            if entries and size + len(entry) + 1 > self._nc.max_payload:
                more = True
                break
            entries.append(entry)
            size += len(entry) + 1
            sequence = found
            if len(entries) < body.limit:
                heads[subject] = await self._next_stored(stream, subject, found)
        if len(entries) == body.limit:
            more = True
        return _Raw(entries, sequence if more else None)

    async def _next_stored(self, stream: str, subject: str, after: int) -> RawStreamMsg | None:
        """The first message stored on `subject` after sequence `after`, if any."""
        try:
            raw = await self._js.get_msg(
                stream, seq=after + 1, subject=subject, next=True, direct=True
            )
        except NotFoundError:
            return None
        return raw if int(raw.seq or 0) > after else None

    async def _last(self, stream: str, subject: str) -> int:
        try:
            raw = await self._js.get_last_msg(stream, subject, direct=True)
        except NotFoundError:
            return 0
        return int(raw.seq or 0)

    async def _cursors(self) -> KeyValue:
        if self._kv is None:
            try:
                self._kv = await self._js.key_value(self._subjects.cursors_bucket)
            except (NotFoundError, BucketNotFoundError):
                raise _Failure(
                    500, f"KV bucket {self._subjects.cursors_bucket} missing: restart the core"
                ) from None
        return self._kv

    async def _cursor_get(self, body: _CursorRef, namespace: str) -> _Reply:
        """The position of durable feed `name` of `namespace` (None: never saved)."""
        kv = await self._cursors()
        try:
            entry = await kv.get(f"{namespace}.{body.name}")
        except KeyNotFoundError:
            return {"name": body.name, "sequence": None}
        return {"name": body.name, "sequence": int(entry.value or b"0")}

    async def _cursor_set(self, body: _CursorSet, namespace: str) -> _Reply:
        kv = await self._cursors()
        await kv.put(f"{namespace}.{body.name}", str(body.sequence).encode())
        return {"name": body.name, "sequence": body.sequence}

    async def _ns_health(self, body: _Empty, namespace: str) -> _Reply:
        return await self._health(body)

    # -- admin handlers (every namespace) -----------------------------------------

    async def _admin_create(self, body: _AdminCreate) -> _Reply:
        return await self._create(_Create(id=body.id, metadata=body.metadata), body.namespace)

    async def _admin_get(self, body: _ThreadRef) -> _Reply:
        return _describe(await self._manager.get_thread(body.id))

    async def _admin_list(self, body: _AdminList) -> _Reply:
        if body.namespace is not None:
            return await self._list_in(body.after, body.limit, body.namespace)
        # One id more than asked tells whether another page follows.
        ids = await self._manager.store.list_ids(after=body.after or "", limit=body.limit + 1)
        page = ids[: body.limit]
        return {"threads": page, "next": page[-1] if len(ids) > body.limit else None}

    async def _admin_lookup(self, body: _AdminLookup) -> _Reply:
        metadata = {NAMESPACE_KEY: body.namespace, **body.metadata}
        thread, created = await self._manager.lookup_thread(body.key, body.value, metadata)
        self._resolved(thread.id, namespace_of(thread))
        return {"id": thread.id, "created": created}

    async def _list_in(self, after: str | None, limit: int, namespace: str) -> _Reply:
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

    async def _fork(self, body: _Fork) -> _Reply:
        async def live(stream: Stream) -> None:
            if stream.busy:
                raise _Failure(
                    409,
                    f"thread {stream.id} is answering a message; "
                    "interrupt it or wait for lifecycle done, then fork",
                )
            stream.state().fork(body.turn_id)
            await stream.save()

        thread = await self._change(body.id, live, lambda thread: thread.fork(body.turn_id))
        return {"id": thread.id, "current_tip": thread.current_tip}

    async def _delete(self, body: _ThreadRef) -> _Reply:
        deleted = await self._manager.delete_thread(body.id)
        if self._links is not None:  # its id may come back: its links must not reach it
            await self._links.store.unlink_thread(body.id)
        if self._on_delete is not None:
            self._on_delete(body.id)
        return {"id": body.id, "deleted": deleted}

    @staticmethod
    def _check_key(key: str) -> None:
        if key == NAMESPACE_KEY:
            raise _Failure(
                400, f"key: {NAMESPACE_KEY} is set when a thread is created and never changes"
            )

    async def _meta_set(self, body: _MetaSet) -> _Reply:
        self._check_key(body.key)
        thread = await self._change(
            body.id,
            lambda stream: stream.set_metadata(body.key, body.value),
            lambda thread: thread.meta().set(body.key, body.value),
        )
        return {"id": thread.id, "metadata": thread.meta().all()}

    async def _meta_delete(self, body: _MetaDelete) -> _Reply:
        self._check_key(body.key)
        thread = await self._change(
            body.id,
            lambda stream: stream.delete_metadata(body.key),
            lambda thread: thread.meta().delete(body.key),
        )
        return {"id": thread.id, "metadata": thread.meta().all()}

    async def _turns(self, body: _ThreadRef) -> _Reply:
        thread = await self._manager.get_thread(body.id)
        return {"id": thread.id, "turns": [turn_to_dict(turn) for turn in thread.turns()]}

    async def _health(self, body: _Empty) -> _Reply:
        return {"status": "ok", "version": self._version, "streams": len(self._manager.list())}

    async def _change(
        self,
        thread_id: str,
        live: Callable[[Stream], Awaitable[None]],
        stored: Callable[[Thread], object],
    ) -> Thread:
        """Apply a change through the active stream (which announces it) or to the store."""
        try:
            stream = self._manager.get(thread_id)
        except SessionNotFound:
            pass
        else:
            await live(stream)
            return stream.state()
        thread = await self._manager.store.get(thread_id)
        stored(thread)
        await self._manager.store.save(thread)
        return thread
