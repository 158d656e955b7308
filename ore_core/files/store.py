"""Files in and out of the object store bucket, stored once by content.

An uploaded file's object name is its sha256, so the same bytes sent a hundred times
(or by every endpoint of a bridge) are one object: `upload` looks the name up first and
stores only what is not there. `fetch` checks the bytes against the reference, so a
file that was replaced, cut short or is gone raises one clear error instead of handing
on something else. What a conduit may do here is set by `ore auth` (docs/protocol.md,
"Files").
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import mimetypes
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from nats.js import api
from nats.js.errors import NotFoundError, ObjectNotFoundError
from nats.js.object_store import ObjectStore

from ore_core._nats.object_store import NamedReads
from ore_core.artifacts.attachment import Attachment
from ore_core.errors import OreError
from ore_core.files.policy import FilePolicy

if TYPE_CHECKING:
    from nats.js import JetStreamContext

__all__ = [
    "FileCorrupt",
    "FileMissing",
    "FileStore",
    "StoredFile",
    "Uploads",
    "checked",
    "guess_media_type",
    "nats_digest",
    "save_file",
]

DEFAULT_MEDIA_TYPE = "application/octet-stream"


@dataclass(frozen=True, slots=True)
class StoredFile:
    """One file in the bucket: its sha256, size and when it was stored (None when its
    description does not say)."""

    sha256: str
    size: int
    stored_at: datetime | None


class FileMissing(OreError):
    """The attachment's bytes are not in the bucket (never stored, or removed)."""


class FileCorrupt(OreError):
    """The stored bytes are not the attachment's (cut short, changed, replaced)."""


def guess_media_type(name: str) -> str:
    """The media type a file name suggests, else `application/octet-stream`."""
    guessed, _ = mimetypes.guess_type(name, strict=False)
    return (guessed or DEFAULT_MEDIA_TYPE).lower()


class Uploads:
    """Uploading, stored once by content: the part the core and conduits share.

    Subclasses say how to learn whether a file is stored (`stored`) and write through
    `_writer`, nats-py's object store `put` (of which a conduit may use only the writes).
    """

    bucket: str
    policy: FilePolicy
    _writer: ObjectStore

    async def stored(self, attachment: Attachment) -> bool:
        """Whether the attachment's bytes are in the bucket, whole."""
        raise NotImplementedError

    async def upload(
        self, source: bytes | Path, name: str | None = None, media_type: str | None = None
    ) -> Attachment:
        """Store `source` (bytes, or a file's path) unless the same bytes are stored.

        `name` defaults to the file's name, `media_type` to what the name suggests.
        Raises `FileRefused` (the policy), `FileCorrupt` (the file changed while it was
        read) or the bus's error; nothing is half stored under the name.
        """
        if name is None:
            if not isinstance(source, Path):
                raise ValueError("upload(bytes) needs a name")
            name = source.name
        media_type = (media_type or guess_media_type(name)).lower()
        size = len(source) if isinstance(source, bytes) else await _file_size(source)
        self.policy.check(name, media_type, size)
        sha256 = await _sha256(source)
        attachment = Attachment(name, media_type, size, sha256, self.bucket)
        if not await self.stored(attachment):
            await self._put(source, attachment)
        return attachment

    async def _put(self, source: bytes | Path, attachment: Attachment) -> None:
        meta = api.ObjectMeta(name=attachment.sha256, description=attachment.media_type)
        if isinstance(source, bytes):
            info = await self._writer.put(attachment.sha256, source, meta)
        else:
            with source.open("rb") as file:
                info = await self._writer.put(attachment.sha256, file, meta)
        if info.size != attachment.size or info.digest != nats_digest(attachment.sha256):
            raise FileCorrupt(f"{attachment.name} changed while it was uploaded; send it again")


class FileStore(Uploads):
    """The core's access to the bucket `bucket`: upload, fetch, delete, measure."""

    def __init__(self, js: JetStreamContext, bucket: str, policy: FilePolicy | None = None) -> None:
        self.bucket = bucket
        self.policy = policy or FilePolicy()
        self._objects = self._writer = NamedReads(bucket, js)

    async def stored(self, attachment: Attachment) -> bool:
        try:
            info = await self._objects.get_info(attachment.sha256)
        except ObjectNotFoundError:
            return False
        return info.size == attachment.size and info.digest == nats_digest(attachment.sha256)

    async def fetch(self, attachment: Attachment) -> bytes:
        """The attachment's bytes, checked against its sha256 and size."""
        try:
            info = await self._objects.get_info(attachment.sha256)
        except ObjectNotFoundError:
            raise FileMissing(
                f"{attachment.name} is no longer stored (sha256 {attachment.sha256[:12]})"
            ) from None
        data, sha256 = await self._objects.read(info)
        return checked(attachment, data, sha256)

    async def fetch_to(self, attachment: Attachment, directory: Path) -> Path:
        """Fetch the attachment into `directory` under its name (a free variant of it)."""
        return await save_file(directory, attachment.name, await self.fetch(attachment))

    async def delete(self, sha256: str) -> None:
        """Remove one stored file (the core's; a conduit may not)."""
        await self._objects.delete(sha256)

    async def stored_files(self) -> list[StoredFile]:
        """Every file in the bucket (removed ones left out)."""
        try:
            infos = await self._objects.list(ignore_deletes=True)
        except NotFoundError:  # nats-py's answer for an empty bucket
            return []
        return [
            StoredFile(str(info.name), int(info.size or 0), _stored_at(info.mtime))
            for info in infos
            if not info.deleted
        ]

    async def stored_bytes(self) -> int:
        """Bytes the bucket holds, chunks and descriptions (the core's; a conduit may not)."""
        status = await self._objects.status()
        return int(status.size)


def _stored_at(mtime: str | None) -> datetime | None:
    try:
        return datetime.fromisoformat(mtime) if mtime else None
    except ValueError:
        return None


def checked(attachment: Attachment, data: bytes, sha256: str) -> bytes:
    """`data` when it is the attachment's bytes (`sha256` is theirs), else FileCorrupt."""
    if sha256 != attachment.sha256 or len(data) != attachment.size:
        raise FileCorrupt(
            f"{attachment.name}: the stored bytes are not the file sent "
            f"({len(data)} of {attachment.size} bytes, sha256 {sha256[:12]})"
        )
    return data


def nats_digest(sha256_hex: str) -> str:
    """The object store's spelling of a sha256: `SHA-256=<base64url>`."""
    return "SHA-256=" + base64.urlsafe_b64encode(bytes.fromhex(sha256_hex)).decode()


async def _sha256(source: bytes | Path) -> str:
    if isinstance(source, bytes):
        return hashlib.sha256(source).hexdigest()

    def digest() -> str:
        with source.open("rb") as file:
            return hashlib.file_digest(file, "sha256").hexdigest()

    return await asyncio.to_thread(digest)


async def _file_size(path: Path) -> int:
    return (await asyncio.to_thread(path.stat)).st_size


async def save_file(directory: Path, name: str, data: bytes) -> Path:
    """Write `data` to `directory/name`, or `name (2)`, `name (3)`... when it exists."""
    safe = Path(name).name
    return await asyncio.to_thread(_save, directory, "file" if safe in ("", "..") else safe, data)


def _save(directory: Path, name: str, data: bytes) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    stem, suffix, number = path.stem, path.suffix, 2
    while True:
        try:
            with path.open("xb") as file:
                file.write(data)
            return path
        except FileExistsError:
            path = directory / f"{stem} ({number}){suffix}"
            number += 1
