"""A conduit's files: it writes its uploads, and reads through the core.

`ConduitFiles` is what `ConduitClient.upload` and `fetch` use. An upload asks the core
whether the bytes are stored (`files.stat`) and writes them into the bucket only when
not; a fetch subscribes the conduit's own inbox, asks the core to send the chunks there
(`files.read`, which checks that the file is attached to a thread the namespace
reaches) and checks what arrives against the reference.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from nats.aio.client import Client as NatsClient

from ore_core._nats.object_store import WriteOnly
from ore_core.artifacts.attachment import Attachment
from ore_core.errors import ApiError
from ore_core.files.policy import FilePolicy
from ore_core.files.store import FileCorrupt, FileMissing, Uploads, checked

__all__ = ["ConduitFiles"]

Call = Callable[[str, Mapping[str, Any]], Awaitable[dict[str, Any]]]
"""A conduit API call: method name and body to the reply's JSON (`ConduitClient._call`)."""

CHUNK_WAIT = 10.0
"""Seconds without a chunk before a fetch gives up on the rest."""


class ConduitFiles(Uploads):
    """Uploads and fetches of one conduit connection (see the module docstring)."""

    def __init__(
        self, nc: NatsClient, bucket: str, call: Call, policy: FilePolicy | None = None
    ) -> None:
        self.bucket = bucket
        self.policy = policy or FilePolicy()
        self._nc = nc
        self._call = call
        self._writer = WriteOnly(bucket, nc.jetstream())

    async def stored(self, attachment: Attachment) -> bool:
        reply = await self._call("files.stat", {"sha256": attachment.sha256})
        return bool(reply.get("stored")) and reply.get("size") == attachment.size

    async def fetch(self, thread_id: str, attachment: Attachment) -> bytes:
        """The bytes of `attachment`, attached to thread `thread_id`, checked against its
        sha256: `FileMissing` when the core does not have them for this namespace,
        `FileCorrupt` when what arrived is not them."""
        body = {"thread": thread_id, "sha256": attachment.sha256}
        _, data = await self._read(body, attachment)
        return data

    async def fetch_link(self, token: str) -> tuple[Attachment, bytes]:
        """The file a signed link's token names, and its bytes, checked; `ApiError` 403
        for a forged or expired token, `FileMissing` / `FileCorrupt` as `fetch`."""
        return await self._read({"token": token}, None)

    async def link(self, thread_id: str, attachment: Attachment) -> str | None:
        """A signed link to `attachment` of thread `thread_id`; None when the deployment
        serves no links (`files.link_base`)."""
        reply = await self._call("files.link", {"thread": thread_id, "sha256": attachment.sha256})
        url = reply.get("url")
        return str(url) if url else None

    async def _read(
        self, body: dict[str, str], attachment: Attachment | None
    ) -> tuple[Attachment, bytes]:
        """`files.read` of `body` into an inbox of this connection; the file (`attachment`,
        else the one the reply names) and its checked bytes."""
        inbox = self._nc.new_inbox()
        chunks: asyncio.Queue[bytes] = asyncio.Queue()

        async def on_chunk(msg: Any) -> None:
            chunks.put_nowait(msg.data)

        sub = await self._nc.subscribe(inbox, cb=on_chunk)
        try:
            try:
                reply = await self._call("files.read", {**body, "inbox": inbox})
            except ApiError as exc:
                if exc.status == 404:
                    name = attachment.name if attachment else "the file"
                    raise FileMissing(f"{name}: {exc.message}") from None
                raise
            if attachment is None:
                attachment = Attachment.from_dict(reply["attachment"])
            data = await _collect(attachment, chunks, int(reply.get("chunks", 0)))
            return attachment, data
        finally:
            await sub.unsubscribe()


async def _collect(attachment: Attachment, chunks: asyncio.Queue[bytes], count: int) -> bytes:
    buffer, digest = io.BytesIO(), hashlib.sha256()
    for _ in range(count):
        try:
            data = await asyncio.wait_for(chunks.get(), CHUNK_WAIT)
        except TimeoutError:
            raise FileCorrupt(
                f"{attachment.name}: the transfer stopped after {buffer.tell()} of "
                f"{attachment.size} bytes"
            ) from None
        buffer.write(data)
        digest.update(data)
    return checked(attachment, buffer.getvalue(), digest.hexdigest())
