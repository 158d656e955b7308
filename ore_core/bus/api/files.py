"""The core's file methods: `files.stat`, `files.read` and `files.link` for conduits,
`files.sweep` for operators.

A conduit writes its uploads straight into the bucket but reads nothing of it itself: a
NATS permission cannot pin a read to one object. `files.stat` says whether a file is
stored (so an upload stores it once); `files.read` checks that the file is attached to
a thread the namespace reaches (its own, or linked to it) and has the server send the
chunks to the conduit's own inbox, or, given a signed link's token instead of a
thread (`files.link` makes them, `ore_core.files.links`), checks the token. docs/protocol.md,
"Files", is the contract. It also
installs the core's `FileStore` as this process's reader for turn processors
(`ore_core.files.reading`).
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

import structlog
from nats.aio.client import Client as NatsClient
from nats.errors import Error as NatsError
from nats.js.errors import KeyWrongLastSequenceError, ObjectNotFoundError
from pydantic import Field, model_validator

from ore_core._nats.object_store import NamedReads
from ore_core.artifacts.attachment import Attachment
from ore_core.bus.api.access import ThreadAccess
from ore_core.bus.api.api_base import ApiFailure, Reply, RequestBody, ThreadId
from ore_core.errors import OreError
from ore_core.files.links import FileLinks, LinkRefused, LinkSettings
from ore_core.files.reading import use_reader
from ore_core.files.store import FileStore
from ore_core.files.sweep import SweepRefused, Swept, sweep
from ore_core.ledger.thread import Thread
from ore_core.session.protocols import Store
from ore_core.subjects import Subjects

__all__ = ["LINK_KEY", "FileApi", "FileLink", "FileRead", "FileStat", "FileSweep"]

log = structlog.get_logger("ore.bus.files")

Handler = Callable[[Any, str], Awaitable[Reply]]

Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]

LINK_KEY = "files.link_key"
"""The key in `ORE_LINKS` holding the generated key that signs file links."""


class FileStat(RequestBody):
    """`files.stat`: is the file of this sha256 stored?"""

    sha256: Sha256


class FileRead(RequestBody):
    """`files.read`: send the chunks of a file attached to `thread` to `inbox`; or, with
    `token` (a signed link's) instead of `thread` and `sha256`, of the file it names."""

    thread: ThreadId | None = None
    sha256: Sha256 | None = None
    token: Annotated[str, Field(max_length=4096)] | None = None
    inbox: Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)+$")]

    @model_validator(mode="after")
    def _one_way(self) -> FileRead:
        if (self.token is None) == (self.thread is None or self.sha256 is None):
            raise ValueError("give either thread and sha256, or token")
        return self


class FileLink(RequestBody):
    """`files.link`: a signed link to the file of `sha256` attached to `thread`."""

    thread: ThreadId
    sha256: Sha256


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
        links: LinkSettings | None = None,
    ) -> None:
        self._subjects = subjects
        self._js = nc.jetstream()
        self._link_settings = links or LinkSettings(base="", secret="", ttl=0.0)
        self._links: FileLinks | None = None
        self._objects = NamedReads(subjects.files_bucket, nc.jetstream())
        self._access = access
        self._store = store
        self._retention = retention
        self._files = FileStore(nc.jetstream(), subjects.files_bucket)
        use_reader(self._files)  # for processors

    def conduit_methods(self) -> list[tuple[str, type[Any], Handler]]:
        """(method, request model, handler) of each conduit method, for the control API."""
        return [
            ("files.stat", FileStat, self.stat),
            ("files.read", FileRead, self.read),
            ("files.link", FileLink, self.link),
        ]

    def admin_methods(self) -> list[tuple[str, type[Any], Callable[[Any], Awaitable[Reply]]]]:
        """(method, request model, handler) of each operator method."""
        return [("files.sweep", FileSweep, self.sweep)]

    async def sweep(self, body: FileSweep) -> Reply:
        """Mark and sweep (`ore_core.files.sweep`); what was kept and removed."""
        older_than = self._retention if body.older_than is None else body.older_than
        try:
            swept = await self._sweep(older_than)
        except SweepRefused as exc:
            raise ApiFailure(409, str(exc), "conflict") from None
        return swept.as_dict()

    async def sweep_every(self, every: float, elected: Callable[[], bool]) -> None:
        """Sweep files older than the retention every `every` seconds, while `elected()`
        (the owner of partition 0: one worker of a cluster reads the whole store, not
        each). A refused or failed sweep is logged and tried again next time."""
        while True:
            await asyncio.sleep(every)
            if not elected():
                continue
            try:
                swept = await self._sweep(self._retention)
            except SweepRefused as exc:
                log.warning("files sweep refused; nothing removed", reason=str(exc))
            except (OreError, NatsError, TimeoutError) as exc:
                log.warning("files sweep failed; tried again later", error=str(exc))
            else:
                log.info("files swept", **swept.as_dict())

    async def _sweep(self, older_than: float) -> Swept:
        age = timedelta(seconds=older_than)
        return await sweep(self._store, self._files, age, datetime.now(UTC))

    async def stat(self, body: FileStat, namespace: str) -> Reply:
        """`{"stored": bool, "size": n}`: whether the bytes of `sha256` are stored."""
        try:
            info = await self._objects.get_info(body.sha256)
        except ObjectNotFoundError:
            return {"stored": False}
        return {"stored": True, "size": info.size}

    async def read(self, body: FileRead, namespace: str) -> Reply:
        """Start the chunks towards `inbox`; the reply says how many come (and, read by
        token, which file they are)."""
        if not body.inbox.startswith(self._subjects.inbox(namespace) + "."):
            raise ApiFailure(
                400, "files.read delivers to the namespace's own inbox only", "bad_inbox"
            )
        if body.token is not None:
            attachment = await self._by_token(body.token)
            reply = await self._deliver(attachment.sha256, body.inbox)
            return {**reply, "attachment": attachment.to_dict()}
        assert body.thread is not None  # the model's rule: with no token, both are given
        assert body.sha256 is not None
        await self._attachment(body.thread, body.sha256, namespace)
        return await self._deliver(body.sha256, body.inbox)

    async def link(self, body: FileLink, namespace: str) -> Reply:
        """`{"url": str}`, a signed link to the file, or `{"url": null}` when the
        deployment has no `files.link_base`."""
        attachment = await self._attachment(body.thread, body.sha256, namespace)
        if not self._link_settings.base:
            return {"url": None}
        return {"url": (await self._signer()).url(attachment)}

    async def _attachment(self, thread_id: str, sha256: str, namespace: str) -> Attachment:
        thread = await self._access.own_thread(thread_id, namespace)
        found = _attached(thread, sha256)
        if found is None:
            raise ApiFailure(404, f"no file {sha256[:12]} in thread {thread.id}")
        return found

    async def _deliver(self, sha256: str, inbox: str) -> dict[str, Any]:
        try:
            info = await self._objects.get_info(sha256)
        except ObjectNotFoundError:
            raise ApiFailure(404, f"file {sha256[:12]} is no longer stored", "file_missing")
        if info.size:
            await self._objects.deliver(info, inbox)
        return {"size": info.size, "chunks": info.chunks}

    async def _by_token(self, token: str) -> Attachment:
        try:
            return (await self._signer()).verify(token)
        except LinkRefused as exc:
            raise ApiFailure(403, str(exc), exc.code) from None

    async def _signer(self) -> FileLinks:
        """The deployment's `FileLinks` (tokens are read even where no more are made,
        `files.link_base` unset since)."""
        if self._links is None:
            settings = self._link_settings
            key = settings.secret.encode() or await self._generated_key()
            bucket = self._subjects.files_bucket
            self._links = FileLinks(settings.base, key, bucket, settings.ttl)
        return self._links

    async def _generated_key(self) -> bytes:
        """The key in `ORE_LINKS`, made by the first worker that needs one."""
        kv = await self._js.key_value(self._subjects.links_bucket)
        try:
            await kv.create(LINK_KEY, secrets.token_bytes(32))
        except KeyWrongLastSequenceError:
            pass  # another worker made it first: use theirs
        entry = await kv.get(LINK_KEY)
        assert entry.value is not None
        return entry.value


def _attached(thread: Thread, sha256: str) -> Attachment | None:
    """The file as a turn of `thread` (any branch) carries it, or None."""
    for turn in thread.all_turns():
        for artifact in turn.artifacts:
            if isinstance(artifact, Attachment) and artifact.sha256 == sha256:
                return artifact
    return None
