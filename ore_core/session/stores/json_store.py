"""JSONStore: one Go-compatible JSON file per thread, `<directory>/<id>.json`.

Writes are atomic and durable: a uniquely named temporary file in the same
directory is written, fsynced and renamed over the old file, then the directory is
fsynced. A crash leaves either the old or the new file, never a torn one. File I/O
and decoding run in worker threads (`asyncio.to_thread`); encoding stays on the loop
because a Thread may only be read by the task that owns it.
"""

from __future__ import annotations

import asyncio
import builtins
import os
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TypeVar

from ore_core.errors import LedgerError, ThreadCorrupt, ThreadNotFound
from ore_core.ids import generate_thread_id, is_valid_thread_id
from ore_core.ledger.thread import Thread
from ore_core.session.stores.base import BaseStore
from ore_core.session.stores.thread_json import decode_thread, encode_thread

__all__ = ["JSONStore"]

_R = TypeVar("_R")

_SUFFIX = ".json"

# (inode, mtime ns, size): a rename-over always makes a new inode, so a file whose
# signature is unchanged still holds what we read last time.
_Signature = tuple[int, int, int]


class JSONStore(BaseStore):
    """Threads as JSON files, readable by the Go framework and by people.

    Every `get` reads the file, so copies are independent and the disk is the truth
    (another process's saves are seen at once). `save` rewrites the whole file, O(size
    of the thread): saving a stale copy replaces the thread, the last save wins.
    `get_by` scans the directory but re-reads only files that changed since the last
    scan. `get_or_create_by` is atomic within one process only.
    """

    name = "json"

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        super().__init__(f"json:{self.directory}")
        self.directory.mkdir(parents=True, exist_ok=True)
        self._metadata: dict[str, tuple[_Signature, dict[str, str] | None]] = {}

    async def create(
        self, thread_id: str | None = None, metadata: Mapping[str, str] | None = None
    ) -> Thread:
        """Write a new empty thread file; never replaces an existing one (ThreadExists)."""
        thread_id = generate_thread_id() if thread_id is None else thread_id
        thread = Thread(self._checked_id(thread_id), metadata=metadata)
        await self._run(self._write_new, thread_id, encode_thread(thread))
        return thread

    async def get(self, thread_id: str) -> Thread:
        """Decode `<id>.json`: ThreadNotFound when absent, ThreadCorrupt when unreadable."""
        return await self._run(self._read, self._checked_id(thread_id))

    async def get_by(self, key: str, value: str) -> Thread:
        """The lowest-id thread whose metadata has `key` == `value`; corrupt files are skipped."""
        self._check_open()
        found = await self._run(self._find, key, value)
        if found is None:
            raise self._no_match(key, value)
        return found

    async def save(self, thread: Thread) -> None:
        """Atomically replace the thread's file with its current state."""
        thread_id = self._checked_id(thread.id)
        await self._run(self._write, thread_id, encode_thread(thread))

    async def delete(self, thread_id: str) -> bool:
        """Remove `<id>.json`; True when the file existed (loaded before or not)."""
        path = self._path(self._checked_id(thread_id))
        self._metadata.pop(thread_id, None)
        return await self._run(self._remove, path)

    async def _thread_ids(self) -> builtins.list[str]:
        return await self._run(self._scan_ids)

    async def _run(self, func: Callable[..., _R], *args: object) -> _R:
        """`func(*args)` in a worker thread; OS errors become StoreError."""
        try:
            return await asyncio.to_thread(func, *args)
        except OSError as exc:
            raise self._failed(exc) from exc

    # -- blocking helpers, run in worker threads ------------------------------------------

    def _path(self, thread_id: str) -> Path:
        return self.directory / f"{thread_id}{_SUFFIX}"

    def _corrupt(self, thread_id: str, path: Path, cause: Exception) -> ThreadCorrupt:
        return ThreadCorrupt(
            f"thread {thread_id} in {self.location} is unreadable: file {path}: {cause} "
            "(repair or delete the file)"
        )

    def _read(self, thread_id: str) -> Thread:
        path = self._path(thread_id)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise self._not_found(thread_id) from None
        except OSError as exc:
            raise self._corrupt(thread_id, path, exc) from exc
        try:
            return decode_thread(data, expected_id=thread_id)
        except LedgerError as exc:
            raise self._corrupt(thread_id, path, exc) from exc

    def _write_new(self, thread_id: str, data: bytes) -> None:
        self._write(thread_id, data, exclusive=True)

    def _write(self, thread_id: str, data: bytes, *, exclusive: bool = False) -> None:
        path = self._path(thread_id)
        fd, temp_name = tempfile.mkstemp(prefix=f".{thread_id}.", suffix=".tmp", dir=self.directory)
        try:
            with os.fdopen(fd, "wb") as temp:
                temp.write(data)
                temp.flush()
                os.fsync(temp.fileno())
            if exclusive:
                # link() refuses an existing target: create never overwrites, even racing.
                try:
                    os.link(temp_name, path)
                except FileExistsError:
                    raise self._exists(thread_id) from None
            else:
                os.replace(temp_name, path)
            _fsync_directory(self.directory)
        finally:
            if os.path.lexists(temp_name):
                os.unlink(temp_name)

    def _remove(self, path: Path) -> bool:
        try:
            path.unlink()
        except FileNotFoundError:
            return False
        _fsync_directory(self.directory)
        return True

    def _scan_ids(self) -> builtins.list[str]:
        with os.scandir(self.directory) as entries:
            names = [entry.name for entry in entries if entry.name.endswith(_SUFFIX)]
        # Foreign files whose stem is not a valid id are not ours to load.
        return sorted(
            stem for stem in (name[: -len(_SUFFIX)] for name in names) if is_valid_thread_id(stem)
        )

    def _find(self, key: str, value: str) -> Thread | None:
        seen: dict[str, tuple[_Signature, dict[str, str] | None]] = {}
        found: Thread | None = None
        for thread_id in self._scan_ids():
            try:
                stat = self._path(thread_id).stat()
            except FileNotFoundError:
                continue
            signature = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
            cached = self._metadata.get(thread_id)
            thread: Thread | None = None
            if cached is not None and cached[0] == signature:
                metadata = cached[1]
            else:
                thread = self._read_or_none(thread_id)
                metadata = None if thread is None else thread.meta().all()
            seen[thread_id] = (signature, metadata)
            if metadata is not None and metadata.get(key) == value:
                found = thread if thread is not None else self._read_or_none(thread_id)
                if found is not None:
                    break
        self._metadata.update(seen)
        return found

    def _read_or_none(self, thread_id: str) -> Thread | None:
        try:
            return self._read(thread_id)
        except (ThreadCorrupt, ThreadNotFound):
            return None


def _fsync_directory(directory: Path) -> None:
    """Make a rename or unlink in `directory` durable (POSIX; Windows has no such call)."""
    if os.name != "posix":
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
