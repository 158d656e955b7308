"""What the built-in stores share: id checks, paging, lookup-or-create, error messages.

Third-party stores need none of this: they implement the `Store` protocol directly
and prove it with `ore_core.testing.store_conformance`.
"""

from __future__ import annotations

import asyncio
import builtins
import os
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import TYPE_CHECKING

from ore_core.errors import (
    StaleThread,
    StoreError,
    ThreadCorrupt,
    ThreadExists,
    ThreadNotFound,
)
from ore_core.ids import validate_thread_id

if TYPE_CHECKING:
    from ore_core.ledger.thread import Thread

__all__ = ["BaseStore", "directory_fault", "probe_directory", "stale_thread"]


def probe_directory(directory: str | os.PathLike[str]) -> None:
    """Write, fsync and remove a small file in `directory`: OSError when it cannot take
    a write now (read-only, full, gone). Blocking: run it in a worker thread."""
    fd, name = tempfile.mkstemp(prefix=".ore-probe-", dir=directory)
    try:
        os.write(fd, b"ore store probe\n" * 64)
        os.fsync(fd)
    finally:
        os.close(fd)
        os.unlink(name)


def directory_fault(directory: str | os.PathLike[str]) -> str | None:
    """Why nothing can be written in `directory` (a read-only or full file system, no
    permission), or None when none of these is the case. For an error message: a
    database's own words ("unable to open database file") name neither cause nor path."""
    try:
        disk = os.statvfs(directory)
    except OSError:
        return None  # gone or unreachable: the caller's own error says so
    if disk.f_flag & os.ST_RDONLY:
        return f"the file system holding {os.fspath(directory)} is read-only"
    if disk.f_bavail == 0 or disk.f_favail == 0:
        return f"the file system holding {os.fspath(directory)} is full"
    if not os.access(directory, os.W_OK):
        return f"{os.fspath(directory)} is not writable by this user"
    return None


def stale_thread(thread_id: str, location: str) -> StaleThread:
    """The error of a refused compare-and-set save (one wording for every store)."""
    return StaleThread(
        f"thread {thread_id} in {location}: another worker changed this thread after this "
        "copy was loaded, so the save was refused and nothing was written; reload it"
    )


class BaseStore(ABC):
    """Shared behaviour of the built-in stores.

    Subclasses implement create/get/get_by/save/delete and `_thread_ids`; this class
    gives them `list`, `list_ids`, an in-process atomic `get_or_create_by` and the
    closed-store check. `location` (e.g. `json:/var/ore/threads`) appears in every
    error message so the reader knows which store answered.
    """

    name: str = ""

    def __init__(self, location: str) -> None:
        self.location = location
        self._closed = False
        # Serialises lookup-or-create inside this process (see get_or_create_by).
        self._lookup_lock = asyncio.Lock()

    @abstractmethod
    async def create(
        self, thread_id: str | None = None, metadata: Mapping[str, str] | None = None
    ) -> Thread:
        """A new, persisted, empty thread. A given id that exists raises `ThreadExists`."""

    @abstractmethod
    async def get(self, thread_id: str) -> Thread:
        """The stored thread (all branches, tip and metadata), as an independent copy."""

    @abstractmethod
    async def get_by(self, key: str, value: str) -> Thread:
        """The thread with the lowest id whose metadata has `key` == `value`."""

    @abstractmethod
    async def save(self, thread: Thread) -> None:
        """Persist the thread's changes."""

    @abstractmethod
    async def delete(self, thread_id: str) -> bool:
        """Remove the thread; True when it existed."""

    @abstractmethod
    async def _thread_ids(self) -> builtins.list[str]:
        """Every stored thread id, sorted."""

    async def get_or_create_by(
        self, key: str, value: str, metadata: Mapping[str, str] | None = None
    ) -> tuple[Thread, bool]:
        """Find the thread with metadata `key` == `value`, or create it with that pair.

        Atomic within this process (one lock around lookup and create); stores shared by
        several processes override this with a cross-process transaction.
        """
        self._check_open()
        async with self._lookup_lock:
            try:
                return await self.get_by(key, value), False
            except ThreadNotFound:
                pass
            return await self.create(None, {**(metadata or {}), key: value}), True

    async def list(self) -> builtins.list[Thread]:
        """Every readable thread by id; corrupt ones and ones deleted meanwhile are skipped."""
        threads: builtins.list[Thread] = []
        for thread_id in await self.list_ids():
            try:
                threads.append(await self.get(thread_id))
            except (ThreadCorrupt, ThreadNotFound):
                continue
        return threads

    async def list_ids(self, *, after: str = "", limit: int | None = None) -> builtins.list[str]:
        """Thread ids in ascending order, strictly after `after`, at most `limit` of them."""
        self._check_open()
        ids = [thread_id for thread_id in await self._thread_ids() if thread_id > after]
        return ids if limit is None else ids[: max(limit, 0)]

    async def check(self) -> None:
        """Raise StoreError unless the store can take a save now (the health probe).

        The default reads; file stores override it with a small write.
        """
        await self.list_ids(limit=1)

    async def close(self) -> None:
        """Mark the store closed; later calls raise StoreError. Idempotent."""
        self._closed = True

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError(f"store {self.location} is closed: open a new store to use it")

    def _checked_id(self, thread_id: str) -> str:
        """`thread_id` once the store is known open and the id is safe (InvalidThreadId)."""
        self._check_open()
        return validate_thread_id(thread_id)

    def _failed(self, cause: Exception) -> StoreError:
        """The error for an I/O or database failure underneath the store."""
        return StoreError(f"{self.location}: {cause}")

    def _not_found(self, thread_id: str) -> ThreadNotFound:
        return ThreadNotFound(f"thread {thread_id} not found in {self.location}")

    def _exists(self, thread_id: str) -> ThreadExists:
        return ThreadExists(
            f"thread {thread_id} already exists in {self.location}: continue it, or pick another id"
        )

    def _stale(self, thread_id: str) -> StaleThread:
        return stale_thread(thread_id, self.location)

    def _no_match(self, key: str, value: str) -> ThreadNotFound:
        return ThreadNotFound(f"no thread with metadata {key}={value!r} in {self.location}")
