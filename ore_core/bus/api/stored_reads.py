"""The control API's reads of JetStream: a namespace's stored events (`events.read`, the
catch-up path, so conduits need no JetStream API access) and its durable feeds' cursors."""

from __future__ import annotations

from typing import Annotated

from nats.aio.client import Client as NatsClient
from nats.errors import NoRespondersError
from nats.js.api import RawStreamMsg
from nats.js.errors import BucketNotFoundError, KeyNotFoundError, NotFoundError
from nats.js.kv import KeyValue
from pydantic import Field

from ore_core import jsonutil
from ore_core.bus.api.api_base import ApiFailure, RawReply, Reply, RequestBody, ThreadId
from ore_core.subjects import HEADER_KIND, Subjects

__all__ = ["CursorRef", "CursorSet", "Read", "StoredReads"]

_READ_HEADROOM = 1024  # bytes kept free in an events.read reply for its envelope

_Cursor = Annotated[str, Field(pattern=r"^[A-Za-z0-9-]{1,64}(_[A-Za-z0-9_-]{1,128})?$")]


class CursorRef(RequestBody):
    name: _Cursor


class CursorSet(CursorRef):
    sequence: int = Field(ge=0)


class Read(RequestBody):
    thread: ThreadId | None = None
    after: int = Field(default=0, ge=0)
    limit: int = Field(default=100, ge=0, le=1000)


class StoredReads:
    """Answers `events.read`, `cursors.get` and `cursors.set` for one namespace at a time."""

    def __init__(self, nc: NatsClient, subjects: Subjects) -> None:
        self._nc = nc
        self._js = nc.jetstream()
        self._subjects = subjects
        self._kv: KeyValue | None = None

    async def read(self, body: Read, read: list[str]) -> Reply:
        """Stored events on the subjects `read` after a sequence, merged in sequence order.

        The subject `P.ev.NS.T` holds only what was written while T was in NS, so the
        filter alone keeps other namespaces out: a foreign thread reads as empty, as an
        unknown one does (the control API adds the subjects links show a namespace).
        The reply splices each stored payload in as it is (no re-serialisation) and
        stops before the reply would exceed `max_payload`.
        """
        stream = self._subjects.events_stream
        try:
            return await self._read_stored(stream, read, body)
        except NoRespondersError:
            raise ApiFailure(
                500, f"stream {stream} does not exist: start `ore serve` to create it"
            ) from None

    async def _read_stored(self, stream: str, read: list[str], body: Read) -> Reply:
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
        return RawReply(entries, sequence if more else None)

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
                raise ApiFailure(
                    500, f"KV bucket {self._subjects.cursors_bucket} missing: restart the core"
                ) from None
        return self._kv

    async def cursor_get(self, body: CursorRef, namespace: str) -> Reply:
        """The position of durable feed `name` of `namespace` (None: never saved)."""
        kv = await self._cursors()
        try:
            entry = await kv.get(f"{namespace}.{body.name}")
        except KeyNotFoundError:
            return {"name": body.name, "sequence": None}
        return {"name": body.name, "sequence": int(entry.value or b"0")}

    async def cursor_set(self, body: CursorSet, namespace: str) -> Reply:
        kv = await self._cursors()
        await kv.put(f"{namespace}.{body.name}", str(body.sequence).encode())
        return {"name": body.name, "sequence": body.sequence}
