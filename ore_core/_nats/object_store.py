"""nats-py's object store with the reads ore needs, and a write-only view of it.

`NamedReads` (the core's) reads an object's description by a direct get of its meta
subject, its chunks into one buffer (nats-py's `get` appends to bytes, which slows to
13-25 MiB/s at 5-20 MiB), and can hand an object's chunks to a conduit's inbox through
a consumer it creates for it (`files.read`: the conduit itself may not read the bucket).
`WriteOnly` (a conduit's) is nats-py's `put` without its lookup of an existing object,
which needs read access: the caller asked the core first, and a `put` that never finds
an old version never purges one.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json

from nats.js import api
from nats.js.errors import BadObjectMetaError, NotFoundError, ObjectNotFoundError
from nats.js.object_store import ObjectStore
from nats.nuid import NUID

__all__ = ["NamedReads", "WriteOnly", "chunk_subject", "meta_subject", "object_stream"]

_CHUNK_WAIT = 10.0  # seconds without a chunk before a read gives up
_nuid = NUID()


def object_stream(bucket: str) -> str:
    """The stream that holds bucket `bucket`: `OBJ_<bucket>`."""
    return f"OBJ_{bucket}"


def meta_subject(bucket: str, name: str) -> str:
    """Where the description of object `name` is stored."""
    encoded = base64.urlsafe_b64encode(name.encode()).decode()
    return f"$O.{bucket}.M.{encoded}"


def chunk_subject(bucket: str, nuid: str) -> str:
    """Where the chunks of the object stored under `nuid` are."""
    return f"$O.{bucket}.C.{nuid}"


class NamedReads(ObjectStore):
    """An object store bucket read by name only (see the module docstring)."""

    def __init__(self, bucket: str, js: object) -> None:
        super().__init__(name=bucket, stream=object_stream(bucket), js=js)  # type: ignore[arg-type]
        self.bucket = bucket

    async def get_info(self, name: str, show_deleted: bool | None = False) -> api.ObjectInfo:
        """The object's description by a direct get of its meta subject."""
        try:
            msg = await self._js.get_last_msg(
                self._stream, meta_subject(self.bucket, name), direct=True
            )
        except NotFoundError:
            raise ObjectNotFoundError from None
        try:
            info: api.ObjectInfo = api.ObjectInfo.from_response(json.loads(msg.data or b""))
        except Exception as exc:
            raise BadObjectMetaError from exc
        if info.deleted and not show_deleted:
            raise ObjectNotFoundError
        return info

    async def read(self, info: api.ObjectInfo) -> tuple[bytes, str]:
        """The object's bytes and their sha256 (hex), chunk by chunk; a chunk that does
        not arrive within 10 s raises TimeoutError."""
        digest = hashlib.sha256()
        if not info.size or not info.nuid:
            return b"", digest.hexdigest()
        buffer = io.BytesIO()
        sub = await self._js.subscribe(
            chunk_subject(self.bucket, info.nuid),
            stream=self._stream,
            ordered_consumer=True,
            config=api.ConsumerConfig(name=_nuid.next().decode()),
        )
        try:
            while True:
                msg = await sub.next_msg(timeout=_CHUNK_WAIT)
                buffer.write(msg.data)
                digest.update(msg.data)
                if msg.metadata.num_pending == 0:
                    break
        finally:
            await sub.unsubscribe()
        return buffer.getvalue(), digest.hexdigest()

    async def deliver(self, info: api.ObjectInfo, inbox: str, idle: float = 30.0) -> None:
        """Send the object's chunks, in order, to `inbox` (a conduit's) through a
        consumer of its own that the server removes after `idle` seconds unused."""
        await self._js.add_consumer(
            self._stream,
            api.ConsumerConfig(
                name=_nuid.next().decode(),
                filter_subject=chunk_subject(self.bucket, str(info.nuid)),
                deliver_subject=inbox,
                deliver_policy=api.DeliverPolicy.ALL,
                ack_policy=api.AckPolicy.NONE,
                max_deliver=1,
                mem_storage=True,
                num_replicas=1,
                inactive_threshold=idle,
            ),
        )


class WriteOnly(ObjectStore):
    """nats-py's `put` for a client that may write the bucket but not read it."""

    def __init__(self, bucket: str, js: object) -> None:
        super().__init__(name=bucket, stream=object_stream(bucket), js=js)  # type: ignore[arg-type]

    async def get_info(self, name: str, show_deleted: bool | None = False) -> api.ObjectInfo:
        """Never found: see the module docstring."""
        raise ObjectNotFoundError
