"""The core's file methods: `files.stat` and `files.read` for conduits, `files.sweep`
for operators.

A conduit writes its uploads straight into the bucket but reads nothing of it itself: a
NATS permission cannot pin a read to one object. `files.stat` says whether a file is
stored (so an upload stores it once); `files.read` checks that the file is attached to
a thread the namespace reaches (its own, or linked to it) and has the server send the
chunks to the conduit's own inbox. docs/protocol.md, "Files", is the contract. It also
installs the core's `FileStore` as this process's reader for turn processors
(`ore_core.files.reading`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from nats.aio.client import Client as NatsClient
from nats.js.errors import ObjectNotFoundError
from pydantic import Field

from ore_core._nats.object_store import NamedReads
from ore_core.artifacts.attachment import Attachment
from ore_core.bus.api.access import ThreadAccess
from ore_core.bus.api.api_base import ApiFailure, Reply, RequestBody, ThreadId
from ore_core.files.reading import use_reader
from ore_core.files.store import FileStore
from ore_core.files.sweep import SweepRefused, sweep
from ore_core.ledger.thread import Thread
from ore_core.session.protocols import Store
from ore_core.subjects import Subjects

__all__ = ["FileApi", "FileRead", "FileStat", "FileSweep"]

Handler = Callable[[Any, str], Awaitable[Reply]]

Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]


class FileStat(RequestBody):
    """`files.stat`: is the file of this sha256 stored?"""

    sha256: Sha256


class FileRead(RequestBody):
    """`files.read`: send the chunks of a file attached to `thread` to `inbox`."""

    thread: ThreadId
    sha256: Sha256
    inbox: Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)+$")]


class FileSweep(RequestBody):
    """`files.sweep` (operators): remove the files no thread refers to that were stored
    more than `older_than` seconds ago (default: `files.retention`)."""

    older_than: Annotated[float | None, Field(ge=0)] = None


class FileApi:
    """Answers the file methods of every namespace for the bucket of `subjects`, and
    the operators' `files.sweep` over the threads of `store`."""

    def __init__(
        self,
        nc: NatsClient,
        subjects: Subjects,
        access: ThreadAccess,
        store: Store,
        retention: float,
    ) -> None:
        self._subjects = subjects
        self._objects = NamedReads(subjects.files_bucket, nc.jetstream())
        self._access = access
        self._store = store
        self._retention = retention
        self._files = FileStore(nc.jetstream(), subjects.files_bucket)
        use_reader(self._files)  # for processors

    def conduit_methods(self) -> list[tuple[str, type[Any], Handler]]:
        """(method, request model, handler) of each conduit method, for the control API."""
        return [("files.stat", FileStat, self.stat), ("files.read", FileRead, self.read)]

    def admin_methods(self) -> list[tuple[str, type[Any], Callable[[Any], Awaitable[Reply]]]]:
        """(method, request model, handler) of each operator method."""
        return [("files.sweep", FileSweep, self.sweep)]

    async def sweep(self, body: FileSweep) -> Reply:
        """Mark and sweep (`ore_core.files.sweep`); what was kept and removed."""
        older_than = self._retention if body.older_than is None else body.older_than
        try:
            swept = await sweep(
                self._store, self._files, timedelta(seconds=older_than), datetime.now(UTC)
            )
        except SweepRefused as exc:
            raise ApiFailure(409, str(exc), "conflict") from None
        return swept.as_dict()

    async def stat(self, body: FileStat, namespace: str) -> Reply:
        """`{"stored": bool, "size": n}`: whether the bytes of `sha256` are stored."""
        try:
            info = await self._objects.get_info(body.sha256)
        except ObjectNotFoundError:
            return {"stored": False}
        return {"stored": True, "size": info.size}

    async def read(self, body: FileRead, namespace: str) -> Reply:
        """Start the chunks towards `inbox`; the reply says how many come."""
        if not body.inbox.startswith(self._subjects.inbox(namespace) + "."):
            raise ApiFailure(
                400, "files.read delivers to the namespace's own inbox only", "bad_inbox"
            )
        thread = await self._access.own_thread(body.thread, namespace)
        if not _attached(thread, body.sha256):
            raise ApiFailure(404, f"no file {body.sha256[:12]} in thread {thread.id}")
        try:
            info = await self._objects.get_info(body.sha256)
        except ObjectNotFoundError:
            raise ApiFailure(404, f"file {body.sha256[:12]} is no longer stored", "file_missing")
        if info.size:
            await self._objects.deliver(info, body.inbox)
        return {"size": info.size, "chunks": info.chunks}


def _attached(thread: Thread, sha256: str) -> bool:
    """Whether any turn of `thread` (every branch) carries the file."""
    return any(
        isinstance(artifact, Attachment) and artifact.sha256 == sha256
        for turn in thread.all_turns()
        for artifact in turn.artifacts
    )
