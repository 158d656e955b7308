"""JSONStore: one Go-compatible JSON file per thread, `<directory>/<id>.json`.

Writes are atomic and durable: a uniquely named temporary file in the same
directory is written, fsynced and renamed over the old file, then the directory is
fsynced. Saves are compare-and-set: the store remembers a digest of the bytes each
handed-out copy was read from, and under an exclusive `flock` on the directory's
`.ore-json.lock` (held only for the compare and the rename, so processes sharing
the directory serialise there) refuses with StaleThread to replace a file that
changed meanwhile. A crash leaves either the old or the new file, never a torn one. File I/O
and decoding run in worker threads (`asyncio.to_thread`); encoding stays on the loop
because a Thread may only be read by the task that owns it.
"""

from __future__ import annotations

import asyncio
import builtins
import fcntl
import hashlib
import os
import tempfile
import weakref
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TypeVar

from ore_core.errors import LedgerError, ThreadCorrupt, ThreadNotFound
from ore_core.ids import generate_thread_id, is_valid_thread_id
from ore_core.ledger.thread import Thread
from ore_core.session.stores.base import BaseStore, probe_directory
from ore_core.session.stores.thread_json import decode_thread, encode_thread

__all__ = ["JSONStore"]

_R = TypeVar("_R")

_SUFFIX = ".json"
_LOCK_FILE = ".ore-json.lock"

# (inode, mtime ns, size): a rename-over always makes a new inode, so a file whose
# signature is unchanged still holds what we read last time.
_Signature = tuple[int, int, int]


class JSONStore(BaseStore):
    """Threads as JSON files, readable by the Go framework and by people.

    Every `get` reads the file, so copies are independent and the disk is the truth
    (another process's saves are seen at once). `save` rewrites the whole file, O(size
    of the thread); saving a stale copy raises StaleThread and writes nothing.
    `get_by` scans the directory but re-reads only files that changed since the last
    scan. `get_or_create_by` is atomic within one process only.
    """

    name = "json"

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        super().__init__(f"json:{self.directory}")
        self.directory.mkdir(parents=True, exist_ok=True)
        self._metadata: dict[str, tuple[_Signature, dict[str, str] | None]] = {}
        # Digest of the file each handed-out Thread was read from or last saved as.
        self._versions: weakref.WeakKeyDictionary[Thread, bytes] = weakref.WeakKeyDictionary()

    async def create(
        self, thread_id: str | None = None, metadata: Mapping[str, str] | None = None
    ) -> Thread:
        """Write a new empty thread file; never replaces an existing one (ThreadExists)."""
        thread_id = generate_thread_id() if thread_id is None else thread_id
        thread = Thread(self._checked_id(thread_id), metadata=metadata)
        data = encode_thread(thread)
        await self._run(self._write_new, thread_id, data)
        self._versions[thread] = _digest(data)
        return thread

    async def get(self, thread_id: str) -> Thread:
        """Decode `<id>.json`: ThreadNotFound when absent, ThreadCorrupt when unreadable."""
        return self._hand_out(await self._run(self._read, self._checked_id(thread_id)))

    async def get_by(self, key: str, value: str) -> Thread:
        """The lowest-id thread whose metadata has `key` == `value`; corrupt files are skipped."""
        self._check_open()
        found = await self._run(self._find, key, value)
        if found is None:
            raise self._no_match(key, value)
        return self._hand_out(found)

    async def save(self, thread: Thread) -> None:
        """Atomically replace the thread's file with its current state.

        StaleThread (nothing written) when the file changed since this copy was read;
        a Thread read elsewhere, or whose file was deleted meanwhile, is written as is.
        """
        thread_id = self._checked_id(thread.id)
        data = encode_thread(thread)
        await self._run(self._write_checked, thread_id, data, self._versions.get(thread))
        self._versions[thread] = _digest(data)

    async def delete(self, thread_id: str) -> bool:
        """Remove `<id>.json`; True when the file existed (loaded before or not)."""
        path = self._path(self._checked_id(thread_id))
        self._metadata.pop(thread_id, None)
        return await self._run(self._remove, path)

    async def check(self) -> None:
        """StoreError unless a file can be written in the directory now."""
        self._check_open()
        await self._run(probe_directory, self.directory)

    async def _thread_ids(self) -> builtins.list[str]:
        return await self._run(self._scan_ids)

    async def _run(self, func: Callable[..., _R], *args: object) -> _R:
        """`func(*args)` in a worker thread; OS errors become StoreError."""
        try:
            return await asyncio.to_thread(func, *args)
        except OSError as exc:
            raise self._failed(exc) from exc

    def _hand_out(self, read: tuple[Thread, bytes]) -> Thread:
        thread, version = read
        self._versions[thread] = version
        return thread

    # -- blocking helpers, run in worker threads ------------------------------------------

    def _path(self, thread_id: str) -> Path:
        return self.directory / f"{thread_id}{_SUFFIX}"

    def _corrupt(self, thread_id: str, path: Path, cause: Exception) -> ThreadCorrupt:
        return ThreadCorrupt(
            f"thread {thread_id} in {self.location} is unreadable: file {path}: {cause} "
            "(repair or delete the file)"
        )

    def _read(self, thread_id: str) -> tuple[Thread, bytes]:
        """The decoded thread and the digest of the bytes it came from."""
        path = self._path(thread_id)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise self._not_found(thread_id) from None
        except PermissionError as exc:  # the file is there: the store is unusable, not it
            raise self._failed(exc) from exc
        except OSError as exc:
            raise self._corrupt(thread_id, path, exc) from exc
        try:
            return decode_thread(data, expected_id=thread_id), _digest(data)
        except LedgerError as exc:
            raise self._corrupt(thread_id, path, exc) from exc

    def _write_checked(self, thread_id: str, data: bytes, expected: bytes | None) -> None:
        """Replace the file if it still holds the bytes of digest `expected` (None: any)."""
        with _DirectoryLock(self.directory):
            if expected is None:
                self._write(thread_id, data)
                return
            try:
                current = _digest(self._path(thread_id).read_bytes())
            except FileNotFoundError:
                current = expected  # deleted meanwhile: the copy restores the thread
            if current != expected:
                raise self._stale(thread_id)
            self._write(thread_id, data)

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

    def _find(self, key: str, value: str) -> tuple[Thread, bytes] | None:
        seen: dict[str, tuple[_Signature, dict[str, str] | None]] = {}
        found: tuple[Thread, bytes] | None = None
        for thread_id in self._scan_ids():
            try:
                stat = self._path(thread_id).stat()
            except FileNotFoundError:
                continue
            signature = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
            cached = self._metadata.get(thread_id)
            thread: tuple[Thread, bytes] | None = None
            if cached is not None and cached[0] == signature:
                metadata = cached[1]
            else:
                thread = self._read_or_none(thread_id)
                metadata = None if thread is None else thread[0].meta().all()
            seen[thread_id] = (signature, metadata)
            if metadata is not None and metadata.get(key) == value:
                found = thread if thread is not None else self._read_or_none(thread_id)
                if found is not None:
                    break
        self._metadata.update(seen)
        return found

    def _read_or_none(self, thread_id: str) -> tuple[Thread, bytes] | None:
        try:
            return self._read(thread_id)
        except (ThreadCorrupt, ThreadNotFound):
            return None


def _digest(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=16).digest()


class _DirectoryLock:
    """An exclusive flock on the directory's lock file: one compare-and-replace at a time
    across every process that shares the directory."""

    def __init__(self, directory: Path) -> None:
        self._path = directory / _LOCK_FILE
        self._fd = -1

    def __enter__(self) -> None:
        self._fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX)
        except BaseException:
            os.close(self._fd)
            raise

    def __exit__(self, *exc_info: object) -> None:
        os.close(self._fd)  # also drops the lock


def _fsync_directory(directory: Path) -> None:
    """Make a rename or unlink in `directory` durable (POSIX; Windows has no such call)."""
    if os.name != "posix":
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
