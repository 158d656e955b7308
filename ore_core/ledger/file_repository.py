"""Journal files: one append-only `.jsonl` file per thread, locked, with an fsync policy."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import re
import secrets
import shutil
import threading
import time
from dataclasses import dataclass
from enum import StrEnum
from functools import partial
from pathlib import Path
from typing import BinaryIO
from urllib.parse import unquote_to_bytes

import structlog

from ore_core.errors import JournalLocked, LedgerError
from ore_core.jsonutil import JSONDecodeError, dumps, loads
from ore_core.ledger.clock import Clock, SystemClock
from ore_core.ledger.doorbell import Doorbell
from ore_core.ledger.entries import Entry, EntryWriter, Replay, collector_paused
from ore_core.ledger.journal import JournalState, JournalWriter
from ore_core.ledger.repository import JournalRepository

__all__ = ["FileRepository", "FsyncPolicy", "journal_file_name"]

_log = structlog.get_logger("ore.ledger")

_SUFFIX = ".jsonl"
_ID_SUFFIX = ".id"
_NAME_MAX = 255  # bytes in one path component on every filesystem we care about
_PLAIN_ID = re.compile(r"[A-Za-z0-9_-]{1,128}")
_PLAIN_BYTES = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
_BYTE_TEXT = tuple(chr(b) if b in _PLAIN_BYTES else f"%{b:02X}" for b in range(256))
_MiB = 1024 * 1024
_SCANS_KEPT = 1024  # hydrate results remembered for a first write; older ones are re-read


def journal_file_name(thread_id: str) -> str:
    """The file name of a thread's journal: distinct for distinct ids, never a path.

    A thread-id token (`[A-Za-z0-9_-]{1,128}`) names its file as is, so the Go
    framework's files load. Any other string becomes `~` + its UTF-8 bytes with every
    byte outside `A-Za-z0-9_-` written `%XX`; when that is too long for a file name,
    `~~` + the SHA-256 of the id, with the id kept in a `.id` file beside the journal.
    No result contains a separator or starts with a dot, and the three forms cannot
    meet: only escaped names start with `~`, and an escaped body never contains one.
    """
    if _PLAIN_ID.fullmatch(thread_id):
        return thread_id + _SUFFIX
    data = thread_id.encode("utf-8", "surrogatepass")
    escaped = "~" + "".join([_BYTE_TEXT[b] for b in data]) + _SUFFIX
    if len(escaped) <= _NAME_MAX:
        return escaped
    return "~~" + hashlib.sha256(data).hexdigest() + _SUFFIX


class FsyncPolicy(StrEnum):
    """When appended entries are forced to the disk (see FileRepository for the risks)."""

    ALWAYS = "always"
    BATCH = "batch"
    NEVER = "never"


@dataclass(eq=False, slots=True)
class _Journal:
    """One thread's open journal. Fields change only under `lock`."""

    path: Path
    lock: threading.Lock
    fd: int = -1
    dirty: bool = False  # written since its last fsync
    created: bool = False  # the file is new: its directory entry needs an fsync too
    released: bool = False  # closed for good; a writer must look the thread up again


class FileRepository(JournalRepository):
    """Each thread's journal is one append-only file, `<directory>/<name>.jsonl`.

    File names come from `journal_file_name` (thread-id tokens keep their name; on a
    case-insensitive file system ids differing only in case share a file). A thread's
    file is opened on its first write and stays open, with an exclusive `flock`, until
    `release`, `delete` or `close`: a second process (or a second repository in this
    one) waiting more than `lock_timeout` seconds for it gets `JournalLocked`, so two
    writers never interleave one thread. The lock guards the file, not a reader's
    copy: take it (write) before trusting a hydrate another process might outdate.

    Each writer call is one `write()` of whole lines; the file is never rewritten. If
    it ends in a torn or unreadable tail (a crash mid-write), the first write cuts it
    back to the last complete write and keeps the cut bytes in `<file>.torn-<random>`,
    so new entries never land behind a line replay stops at (that first write reads
    the file once, unless this repository has just hydrated it). Lines longer than
    `max_line_bytes` are refused on write and stop replay on read.

    The fsync policy says what a crash can cost:

    - `always`: fsync after every write. A power loss loses nothing acknowledged;
      every append waits for the disk.
    - `batch` (default, group commit): writes reach the OS at once and a background
      thread fsyncs dirty files at most every `batch_interval` seconds; `flush()` and
      `close()` fsync everything. A process crash loses nothing; a power loss can lose
      the last interval (replay then ends at the last complete write).
    - `never`: the OS writes back when it likes. A process crash loses nothing; a
      power loss can lose whatever the OS had not written yet (typically up to ~30 s).

    Thread-safe: writes to different threads proceed in parallel, writes to one
    thread are serialised. A failed fsync is raised by that write, `flush` or `close`
    and by every later call, because data since the last good fsync may be gone.
    Close the repository (or use it as a context manager): its flusher thread and
    open files live until then.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        fsync: FsyncPolicy | str = FsyncPolicy.BATCH,
        batch_interval: float = 0.05,
        max_line_bytes: int = 16 * _MiB,
        lock_timeout: float = 2.0,
        clock: Clock | None = None,
    ) -> None:
        try:
            self._policy = FsyncPolicy(fsync)
        except ValueError:
            raise LedgerError(
                f"unknown fsync policy {fsync!r}: use one of {[str(p) for p in FsyncPolicy]}"
            )
        self.directory = Path(directory)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise LedgerError(
                f"cannot create journal directory {str(self.directory)!r}: {exc.strerror}; "
                "choose a writable directory"
            ) from exc
        self._always = self._policy is FsyncPolicy.ALWAYS
        self._batch = self._policy is FsyncPolicy.BATCH
        self._batch_interval = batch_interval
        self._max_line_bytes = max_line_bytes
        self._lock_timeout = lock_timeout
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._lock = threading.Lock()  # guards the dicts below and `_closed`
        self._journals: dict[str, _Journal] = {}
        self._writers: dict[str, EntryWriter] = {}
        # thread id -> (inode, size, end of the last complete write) from its last hydrate,
        # so the first write after a hydrate need not read the file again.
        self._scans: dict[str, tuple[int, int, int]] = {}
        self._closed = False
        self._sync_lock = threading.Lock()  # one fsync round at a time
        self._failure: OSError | None = None
        self._flusher = Doorbell(f"ore-journal-fsync {self.directory}", self._flush_loop)

    def __repr__(self) -> str:
        return f"FileRepository({str(self.directory)!r}, fsync={self._policy.value!r})"

    def __enter__(self) -> FileRepository:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- Repository ---------------------------------------------------------------------

    def writer(self, thread_id: str) -> JournalWriter:
        """The writer bound to `thread_id` (the same object for repeated calls)."""
        with self._lock:
            writer = self._writers.get(thread_id)
            if writer is None:
                writer = EntryWriter(
                    partial(self._append, thread_id), self._clock, encoded_turns=True
                )
                self._writers[thread_id] = writer
            return writer

    def hydrate(self, thread_id: str) -> JournalState:
        """Replay the thread's file; a missing file is an empty state.

        Blank lines are skipped. The first torn, unparsable, unknown or over-long line
        stops replay: everything before it is kept and `problem` names the line.
        """
        path = self.path(thread_id)
        try:
            file = path.open("rb")
        except FileNotFoundError:
            return JournalState()
        except OSError as exc:
            raise LedgerError(
                f"cannot read journal {str(path)!r} of thread {thread_id!r}: {exc.strerror}"
            ) from exc
        with file, collector_paused():
            before = os.fstat(file.fileno())
            state, good_end, consumed = self._scan(file, path)
        if consumed == before.st_size:
            with self._lock:
                if len(self._scans) >= _SCANS_KEPT:
                    del self._scans[next(iter(self._scans))]
                self._scans[thread_id] = (before.st_ino, consumed, good_end)
        return state

    def exists(self, thread_id: str) -> bool:
        """True when the thread has a journal file."""
        return self.path(thread_id).is_file()

    def delete(self, thread_id: str) -> bool:
        """Remove the thread's journal (waiting for its lock); True when there was one."""
        journal = self._forget(thread_id)
        fd = -1
        if journal is not None:
            with journal.lock:
                journal.released = True
                fd, journal.fd = journal.fd, -1
        path = self.path(thread_id)
        if fd < 0:
            try:
                fd, _ = self._open_locked(path, thread_id, create=False)
            except FileNotFoundError:
                return False
        try:
            path.unlink()
            _id_file(path).unlink(missing_ok=True)
        finally:
            os.close(fd)
        return True

    def thread_ids(self) -> list[str]:
        """Ids of every thread with a journal file here, sorted (foreign files ignored)."""
        ids = []
        with os.scandir(self.directory) as found:
            for item in found:
                if item.name.endswith(_SUFFIX) and item.is_file():
                    thread_id = self._thread_id_of(item.name)
                    if thread_id is not None:
                        ids.append(thread_id)
        return sorted(ids)

    def flush(self) -> None:
        """fsync every file written since its last fsync (`never`: nothing to do)."""
        self._raise_failure()
        if self._policy is not FsyncPolicy.NEVER:
            self._sync_round()

    def close(self) -> None:
        """Stop the flusher, fsync (unless `never`), unlock and close every file. Idempotent."""
        self._flusher.stop()
        with self._lock:
            self._closed = True
            journals = list(self._journals.values())
            self._journals.clear()
        for journal in journals:
            self._close_journal(journal)
        self._raise_failure()

    # -- beyond the protocol ----------------------------------------------------------------

    def path(self, thread_id: str) -> Path:
        """Where the thread's journal lives (it may not exist yet)."""
        return self.directory / journal_file_name(thread_id)

    def locked_length(self, thread_id: str) -> int | None:
        """Take the thread's lock as a write would and return its journal's length in bytes.

        None (and no file created) when the thread has no journal. While this
        repository holds the lock no other process can append, so a length compared
        here stays true until this repository's next write: the compare of a
        compare-and-set save. A torn tail is cut first (as before any write).
        """
        while True:
            if not self.exists(thread_id):
                return None
            journal = self._journal(thread_id)
            with journal.lock:
                if journal.released:
                    continue  # released meanwhile: look the thread up again
                try:
                    if journal.fd < 0:
                        self._open(journal, thread_id)
                    return os.fstat(journal.fd).st_size
                except OSError as exc:
                    self._abandon(thread_id, journal)
                    raise LedgerError(
                        f"cannot open journal {str(journal.path)!r} of thread {thread_id!r}: {exc}"
                    ) from exc

    def release(self, thread_id: str) -> None:
        """fsync (unless `never`), unlock and close the thread's file, so another process
        may write it. A later write here takes the lock again."""
        journal = self._forget(thread_id)
        if journal is not None:
            self._close_journal(journal)
        self._raise_failure()

    # -- writing ---------------------------------------------------------------------------------

    def _append(self, thread_id: str, entries: list[Entry]) -> None:
        """The sink of every writer: all of one call's lines in one write()."""
        if self._failure is not None:
            self._raise_failure()
        lines = [dumps(entry) for entry in entries]
        lines.append(b"")
        data = b"\n".join(lines)
        if len(data) > self._max_line_bytes:
            self._check_line_lengths(thread_id, lines)
        journal = self._journals.get(thread_id)
        while True:
            if journal is None:
                journal = self._journal(thread_id)
            with journal.lock:
                if not journal.released:
                    self._write(thread_id, journal, data)
                    break
            journal = None  # released meanwhile: look the thread up again
        if self._batch and not self._flusher.rung:
            self._flusher.ring()

    def _write(self, thread_id: str, journal: _Journal, data: bytes) -> None:
        """Write `data` to the journal's file (under `journal.lock`), opening it first."""
        try:
            if journal.fd < 0:
                self._open(journal, thread_id)
            if os.write(journal.fd, data) != len(data):
                raise OSError(errno.EIO, "short write")  # files take all or fail; be sure
            if self._always:
                self._sync_journal(journal)
            else:
                journal.dirty = True
        except OSError as exc:
            # A partial write may be on disk: reopening (on the next write) cuts it off.
            self._abandon(thread_id, journal)
            raise LedgerError(
                f"cannot append to journal {str(journal.path)!r} of thread "
                f"{thread_id!r}: {exc}; the thread was left unchanged"
            ) from exc

    def _check_line_lengths(self, thread_id: str, lines: list[bytes]) -> None:
        for line in lines:
            if len(line) > self._max_line_bytes:
                raise LedgerError(
                    f"journal entry of {len(line)} bytes for thread {thread_id!r} exceeds "
                    f"max_line_bytes={self._max_line_bytes} and could not be read back; "
                    "store large content elsewhere or raise the limit"
                )

    def _journal(self, thread_id: str) -> _Journal:
        with self._lock:
            if self._closed:
                raise LedgerError(
                    f"{self!r} is closed: cannot write thread {thread_id!r}; open a new one"
                )
            journal = self._journals.get(thread_id)
            if journal is None:
                journal = _Journal(self.path(thread_id), threading.Lock())
                self._journals[thread_id] = journal
            return journal

    def _open(self, journal: _Journal, thread_id: str) -> None:
        """Open, lock and, if needed, cut back the thread's file (under `journal.lock`)."""
        path = journal.path
        if path.name.startswith("~~"):
            _write_id_file(path, thread_id)
        fd, created = self._open_locked(path, thread_id, create=True)
        try:
            if not created:
                self._cut_torn_tail(fd, path, thread_id)
        except BaseException:
            os.close(fd)
            raise
        journal.fd = fd
        journal.created = created

    def _open_locked(self, path: Path, thread_id: str, *, create: bool) -> tuple[int, bool]:
        """Open `path` for appending and take its flock; (fd, whether the file is new).

        Raises FileNotFoundError when `create` is false and there is no file, and
        JournalLocked when the lock stays taken for `lock_timeout` seconds.
        """
        deadline = time.monotonic() + self._lock_timeout
        while True:
            fd, created = _open_append(path, create=create)
            try:
                _lock(fd, path, thread_id, deadline)
                if _is_current(fd, path):
                    return fd, created
            except BaseException:
                os.close(fd)
                raise
            os.close(fd)  # deleted or replaced while we waited: lock the file there now

    def _cut_torn_tail(self, fd: int, path: Path, thread_id: str) -> None:
        """Cut the file back to its last complete write, keeping the rest aside."""
        stat = os.fstat(fd)
        with self._lock:
            scan = self._scans.pop(thread_id, None)
        if scan is not None and scan[:2] == (stat.st_ino, stat.st_size):
            good_end = scan[2]
        else:
            with path.open("rb") as file:
                _, good_end, _ = self._scan(file, path)
        if good_end >= stat.st_size:
            return
        aside = path.with_name(f"{path.name}.torn-{secrets.token_hex(4)}")
        with path.open("rb") as source, aside.open("xb") as target:
            source.seek(good_end)
            shutil.copyfileobj(source, target)
            if self._policy is not FsyncPolicy.NEVER:
                target.flush()
                os.fsync(target.fileno())
        os.ftruncate(fd, good_end)
        if self._policy is not FsyncPolicy.NEVER:
            os.fsync(fd)
        _log.warning(
            "journal ended in a torn or unreadable tail: cut back to the last complete write",
            thread_id=thread_id,
            path=str(path),
            kept_bytes=good_end,
            moved_to=str(aside),
        )

    def _scan(self, file: BinaryIO, path: Path) -> tuple[JournalState, int, int]:
        """Replay an open file: (state, end of the last complete write, bytes read)."""
        limit = self._max_line_bytes
        run = Replay()
        good_end = consumed = 0
        complete = True  # no group is waiting for more entries

        def stop(number: int, problem: str) -> tuple[JournalState, int, int]:
            return run.stop(f"line {number} of {str(path)!r} {problem}"), good_end, consumed

        for number, line in enumerate(iter(partial(file.readline, limit + 1), b""), 1):
            consumed += len(line)
            if line[-1] != 10:  # no newline: the end of a torn write, or a line over the limit
                too_long = len(line) > limit
                return stop(number, f"is longer than {limit} bytes" if too_long else "is torn")
            try:
                entry = loads(line)
            except JSONDecodeError as exc:
                if line.strip():
                    return stop(number, f"is not JSON: {exc}")
            else:
                try:
                    complete = run.feed(entry)
                except LedgerError as exc:
                    return stop(number, f"cannot be replayed: {exc}")
            if complete:
                good_end = consumed
        return run.finish(), good_end, consumed

    # -- fsync ---------------------------------------------------------------------------------

    def _flush_loop(self) -> None:
        """Group commit: one fsync round per `batch_interval` at most, only when dirty."""
        while self._flusher.wait():
            try:
                self._sync_round()
            except LedgerError:
                return  # recorded: every later write, flush and close raises it
            self._flusher.rest(self._batch_interval)

    def _sync_round(self) -> None:
        """fsync every dirty file; writers are held up only for an fd dup, never the disk."""
        with self._sync_lock:
            with self._lock:
                journals = list(self._journals.values())
            copies: list[int] = []
            directory_changed = False
            for journal in journals:
                with journal.lock:
                    if journal.fd >= 0 and journal.dirty:
                        copies.append(os.dup(journal.fd))
                        journal.dirty = False
                        directory_changed |= journal.created
                        journal.created = False
            try:
                for fd in copies:
                    os.fsync(fd)
                if directory_changed:
                    _fsync_directory(self.directory)
            except OSError as exc:
                self._failure = exc
                self._raise_failure()
            finally:
                for fd in copies:
                    os.close(fd)

    def _sync_journal(self, journal: _Journal) -> None:
        """fsync one journal now (under `journal.lock`), and its directory if it is new."""
        try:
            os.fsync(journal.fd)
            if journal.created:
                _fsync_directory(self.directory)
        except OSError as exc:
            self._failure = exc
            raise
        journal.dirty = False
        journal.created = False

    def _close_journal(self, journal: _Journal) -> None:
        """fsync if dirty (unless `never`), then close; a failed fsync is recorded."""
        with journal.lock:
            journal.released = True
            if journal.fd < 0:
                return
            try:
                if journal.dirty and self._policy is not FsyncPolicy.NEVER:
                    self._sync_journal(journal)
            except OSError:
                pass  # recorded in _failure; the caller raises it after closing
            finally:
                os.close(journal.fd)  # also drops the flock
                journal.fd = -1

    def _abandon(self, thread_id: str, journal: _Journal) -> None:
        """Close a journal whose file state is unknown (under `journal.lock`)."""
        journal.released = True
        if journal.fd >= 0:
            with contextlib.suppress(OSError):
                os.close(journal.fd)
            journal.fd = -1
        with self._lock:
            if self._journals.get(thread_id) is journal:
                del self._journals[thread_id]

    def _forget(self, thread_id: str) -> _Journal | None:
        with self._lock:
            self._scans.pop(thread_id, None)
            return self._journals.pop(thread_id, None)

    def _raise_failure(self) -> None:
        failure = self._failure
        if failure is not None:
            raise LedgerError(
                f"an fsync in {str(self.directory)!r} failed ({failure}): entries written "
                "since the last successful flush may be lost; close this repository, check "
                "the disk, then reopen"
            ) from failure

    def _thread_id_of(self, name: str) -> str | None:
        """The thread id whose journal is called `name`, or None for a foreign file."""
        stem = name[: -len(_SUFFIX)]
        try:
            if stem.startswith("~~"):
                thread_id = _id_file(self.directory / name).read_text("utf-8", "surrogatepass")
            elif stem.startswith("~"):
                thread_id = unquote_to_bytes(stem[1:]).decode("utf-8", "surrogatepass")
            else:
                thread_id = stem
        except (OSError, UnicodeDecodeError):
            return None
        return thread_id if journal_file_name(thread_id) == name else None


def _open_append(path: Path, *, create: bool) -> tuple[int, bool]:
    flags = os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC
    if create:
        try:
            return os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o644), True
        except FileExistsError:
            pass
    return os.open(path, flags), False


def _lock(fd: int, path: Path, thread_id: str, deadline: float) -> None:
    """Take the exclusive flock, polling until `deadline` (flock cannot time out itself)."""
    delay = 0.002
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise JournalLocked(
                    f"journal {str(path)!r} of thread {thread_id!r} is locked by "
                    f"{_lock_holder(fd)}; stop or close that writer, or wait and retry"
                ) from None
            time.sleep(min(delay, remaining))
            delay = min(delay * 2, 0.05)


def _lock_holder(fd: int) -> str:
    """Who holds the flock on `fd`'s file, from /proc/locks where there is one."""
    stat = os.fstat(fd)
    device = f"{os.major(stat.st_dev):02x}:{os.minor(stat.st_dev):02x}:{stat.st_ino}"
    try:
        table = Path("/proc/locks").read_text()
    except OSError:
        table = ""
    for row in table.splitlines():
        fields = row.split()
        if len(fields) > 5 and fields[1] == "FLOCK" and fields[5] == device:
            if fields[4] == str(os.getpid()):
                return f"another FileRepository in this process (pid {fields[4]})"
            return f"process {fields[4]}"
    return "another process or another FileRepository of this one"


def _is_current(fd: int, path: Path) -> bool:
    """True when `path` still names the file open as `fd` (not deleted or replaced)."""
    opened = os.fstat(fd)
    try:
        current = os.stat(path)
    except FileNotFoundError:
        return False
    return (opened.st_dev, opened.st_ino) == (current.st_dev, current.st_ino)


def _id_file(journal: Path) -> Path:
    return journal.with_name(journal.name[: -len(_SUFFIX)] + _ID_SUFFIX)


def _write_id_file(journal: Path, thread_id: str) -> None:
    """Record the id of a hashed journal name beside it, atomically, once."""
    target = _id_file(journal)
    if target.exists():
        return
    temporary = target.with_name(f"{target.name}.{secrets.token_hex(4)}.tmp")
    temporary.write_text(thread_id, "utf-8", "surrogatepass")
    os.replace(temporary, target)


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
