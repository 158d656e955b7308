"""ControlAPI: the `ore` NATS micro service that manages threads (protocol.md "Control API").

Every endpoint validates its JSON request with a small pydantic model and answers
with JSON. Failures are never a timeout: the reply carries micro's error headers
(`Nats-Service-Error-Code`, `Nats-Service-Error`) and the body
`{"error": {"code": ..., "message": ...}}`. Several workers may run a ControlAPI on
the same subjects: micro's queue group hands each request to one of them, and
lookups stay atomic because the store's `get_or_create_by` is.

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
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from ore_core import jsonutil
from ore_core.conduit.connection import subscriptions_registered
from ore_core.errors import (
    InvalidThreadId,
    SessionClosed,
    SessionNotFound,
    ThreadExists,
    ThreadNotFound,
    TurnNotFound,
)
from ore_core.ids import validate_thread_id
from ore_core.ledger.thread import Thread
from ore_core.session.manager import Manager
from ore_core.session.stream import Stream
from ore_core.subjects import Subjects
from ore_core.turn import turn_to_dict

__all__ = ["DEFAULT_MAX_REQUEST_BYTES", "ERROR_CODES", "SERVICE_NAME", "ControlAPI"]

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

_M = TypeVar("_M", bound="_Body")
_Reply = dict[str, Any]


# --- requests ----------------------------------------------------------------------


class _Body(BaseModel):
    """Requests are strict: unknown fields are typos and answered with 400."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


_ThreadId = Annotated[str, AfterValidator(validate_thread_id)]
_Key = Annotated[str, Field(min_length=1)]


class _Create(_Body):
    id: _ThreadId | None = None
    metadata: dict[str, str] = Field(default_factory=dict)


class _ThreadRef(_Body):
    id: _ThreadId


class _List(_Body):
    after: _ThreadId | None = None
    limit: int = Field(default=100, ge=1, le=1000)


class _Lookup(_Body):
    key: _Key
    value: str
    metadata: dict[str, str] = Field(default_factory=dict)


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
    if isinstance(exc, InvalidThreadId):
        return _Failure(400, str(exc))
    if isinstance(exc, ThreadNotFound | TurnNotFound):
        return _Failure(404, str(exc))
    if isinstance(exc, ThreadExists):
        return _Failure(409, str(exc))
    if isinstance(exc, SessionClosed):
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


# --- the service -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Endpoint:
    name: str  # micro endpoint name (letters, digits, _ and -)
    path: str  # subject below `P.api.`
    handler: Callable[[Request], Awaitable[None]]


class ControlAPI:
    """Serves `P.api.threads.*` and `P.api.health` over `nc` for `manager`.

    `version` must be a semantic version (micro requires it); `instance_metadata`
    shows up in `$SRV.PING/INFO.ore` replies so operators can tell workers apart.
    Requests bigger than `max_request_bytes` are answered with 413.
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
    ) -> None:
        self._nc = nc
        self._manager = manager
        self._subjects = subjects
        self._version = version
        self._metadata = dict(instance_metadata or {})
        self._max_request_bytes = max_request_bytes
        self._service: Service | None = None

    @property
    def endpoints(self) -> dict[str, str]:
        """Endpoint name -> subject, as announced in `$SRV.INFO.ore`."""
        return {e.name: self._subjects.api(e.path) for e in self._endpoints()}

    async def start(self) -> None:
        """Subscribe every endpoint (and micro's `$SRV` discovery subjects). Idempotent."""
        if self._service is not None:
            return
        service = await add_service(
            self._nc,
            name=SERVICE_NAME,
            version=self._version,
            description="ore control API: threads and health",
            metadata=self._metadata,
        )
        for endpoint in self._endpoints():
            await service.add_endpoint(
                name=endpoint.name,
                subject=self._subjects.api(endpoint.path),
                handler=endpoint.handler,
            )
        # flush() alone does not prove the endpoints are live (see bus.barrier).
        await subscriptions_registered(self._nc)
        self._service = service

    async def stop(self) -> None:
        """Unsubscribe; requests in flight elsewhere go to the other workers. Idempotent."""
        service, self._service = self._service, None
        if service is not None:
            await service.stop()

    async def __aenter__(self) -> ControlAPI:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    def _endpoints(self) -> list[_Endpoint]:
        def serve(model: type[_M], handler: Callable[[_M], Awaitable[_Reply]]) -> Any:
            async def endpoint(request: Request) -> None:
                await self._serve(request, model, handler)

            return endpoint

        return [
            _Endpoint("threads_create", "threads.create", serve(_Create, self._create)),
            _Endpoint("threads_get", "threads.get", serve(_ThreadRef, self._get)),
            _Endpoint("threads_list", "threads.list", serve(_List, self._list)),
            _Endpoint("threads_lookup", "threads.lookup", serve(_Lookup, self._lookup)),
            _Endpoint("threads_fork", "threads.fork", serve(_Fork, self._fork)),
            _Endpoint("threads_delete", "threads.delete", serve(_ThreadRef, self._delete)),
            _Endpoint("threads_meta_set", "threads.meta.set", serve(_MetaSet, self._meta_set)),
            _Endpoint(
                "threads_meta_delete", "threads.meta.delete", serve(_MetaDelete, self._meta_delete)
            ),
            _Endpoint("threads_turns", "threads.turns", serve(_ThreadRef, self._turns)),
            _Endpoint("health", "health", serve(_Empty, self._health)),
        ]

    async def _serve(
        self, request: Request, model: type[_M], handler: Callable[[_M], Awaitable[_Reply]]
    ) -> None:
        try:
            if len(request.data) > self._max_request_bytes:
                raise _Failure(
                    413,
                    f"request of {len(request.data)} bytes exceeds the limit of "
                    f"{self._max_request_bytes} bytes",
                )
            body = model.model_validate_json(request.data or b"{}")
            reply = jsonutil.dumps(await handler(body))
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

    # -- handlers -------------------------------------------------------------

    async def _create(self, body: _Create) -> _Reply:
        if body.id is None:
            stream = await self._manager.create(body.metadata)
        else:
            stream = await self._manager.create_with_id(body.id, body.metadata)
        return {"id": stream.id, "created": True}

    async def _get(self, body: _ThreadRef) -> _Reply:
        thread = await self._manager.get_thread(body.id)
        return {
            "id": thread.id,
            "current_tip": thread.current_tip,
            "metadata": thread.meta().all(),
            "turns": len(thread),
        }

    async def _list(self, body: _List) -> _Reply:
        # One id more than asked tells whether another page follows.
        ids = await self._manager.store.list_ids(after=body.after or "", limit=body.limit + 1)
        page = ids[: body.limit]
        return {"threads": page, "next": page[-1] if len(ids) > body.limit else None}

    async def _lookup(self, body: _Lookup) -> _Reply:
        stream, created = await self._manager.lookup_or_create(body.key, body.value, body.metadata)
        return {"id": stream.id, "created": created}

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
        return {"id": body.id, "deleted": await self._manager.delete_thread(body.id)}

    async def _meta_set(self, body: _MetaSet) -> _Reply:
        thread = await self._change(
            body.id,
            lambda stream: stream.set_metadata(body.key, body.value),
            lambda thread: thread.meta().set(body.key, body.value),
        )
        return {"id": thread.id, "metadata": thread.meta().all()}

    async def _meta_delete(self, body: _MetaDelete) -> _Reply:
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
