"""Where the parts find each other: the record of the running `ore serve`, and leftovers.

Every `ore serve` writes its own record `serve.d/<pid>.json` in the user state directory
(its pid, NATS URL, store and who answers) and removes only that one when it stops, so
several workers on one machine (the scale-out pattern) never take each other's record
away; `ore chat --nats auto`, `ore chat` on the same store, `ore conduit NAME`, `ore
threads` and `ore doctor` read them, so nobody has to copy a URL. A record whose
process is gone is stale and ignored (and removed).

`ore chat` runs a private nats-server in a temporary directory. A chat killed with
SIGKILL cannot stop it, so each chat records its server in `chats/<pid>.json`; the
next `ore chat` (or `ore doctor`) reaps the servers and directories of dead chats.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import platformdirs

from ore_core.bus.server.embedded import pid_alive as _alive
from ore_core.bus.server.embedded import runs_in as _runs_in
from ore_core.config import OreSettings

__all__ = [
    "CHAT_NATS_PREFIX",
    "ChatServer",
    "RunningCore",
    "find_running",
    "running_cores",
    "forget_chat_server",
    "leftover_chat_servers",
    "reap_chat_servers",
    "record_chat_server",
    "record_running",
    "remove_record",
    "state_dir",
    "store_key",
]

CHAT_NATS_PREFIX = "ore-chat-nats-"
"""Prefix of the temporary directory of `ore chat`'s private nats-server."""
_RECORDS = "serve.d"
_CHATS = "chats"


def state_dir() -> Path:
    """The user state directory of ore (XDG_STATE_HOME/ore on Linux)."""
    return Path(platformdirs.user_state_dir("ore"))


def store_key(settings: OreSettings) -> str:
    """The store a core would use with `settings`, comparable across processes."""
    return f"{settings.store.name}:{Path(settings.store.path).expanduser().resolve()}"


@dataclass(frozen=True, slots=True)
class RunningCore:
    """A running `ore serve`: who, where its NATS listens, which store it serves, and
    which processor answers (`ore serve`'s "answering with ..." line, without the verb)."""

    pid: int
    nats_url: str
    store: str
    processor: str = ""

    def describe(self) -> str:
        return f"ore serve (pid {self.pid}) at {self.nats_url}, store {self.store}"


def _record(pid: int) -> Path:
    return state_dir() / _RECORDS / f"{pid}.json"


def record_running(core: RunningCore) -> Path:
    """Write the record of this `ore serve` (atomically: readers never see half of it)."""
    path = _record(core.pid)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(
        "w", dir=path.parent, prefix=".serve-", suffix=".json", delete=False, encoding="utf-8"
    ) as temporary:
        json.dump(asdict(core), temporary)
    os.replace(temporary.name, path)
    return path


def remove_record(pid: int) -> None:
    """Remove the record of process `pid` (each serve removes only its own)."""
    _record(pid).unlink(missing_ok=True)


def running_cores() -> list[RunningCore]:
    """Every `ore serve` recorded in the state directory whose process is alive, the
    longest running first; the records of dead ones are removed."""
    folder = state_dir() / _RECORDS
    found: list[tuple[float, RunningCore]] = []
    for path in folder.glob("*.json") if folder.is_dir() else []:
        core = _read_record(path)
        if core is None or path.stem != str(core.pid):
            continue
        if not _alive(core.pid):
            with contextlib.suppress(OSError):  # a read-only state dir keeps the stale record
                path.unlink(missing_ok=True)
            continue
        with contextlib.suppress(OSError):
            found.append((path.stat().st_mtime, core))
    return [core for _, core in sorted(found, key=lambda pair: (pair[0], pair[1].pid))]


def find_running() -> RunningCore | None:
    """The longest running `ore serve` recorded in the state directory, if any is alive."""
    cores = running_cores()
    return cores[0] if cores else None


def _read_record(path: Path) -> RunningCore | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return RunningCore(
            int(data["pid"]),
            str(data["nats_url"]),
            str(data["store"]),
            str(data.get("processor", "")),
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


# -- the private servers of `ore chat` -------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ChatServer:
    """The private nats-server of one `ore chat` and the directory it keeps data in."""

    owner: int
    server: int
    directory: str


def _chat_record(owner: int) -> Path:
    return state_dir() / _CHATS / f"{owner}.json"


def record_chat_server(entry: ChatServer) -> None:
    """Note the server of this chat, so a later chat can clean up if this one is killed."""
    path = _chat_record(entry.owner)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(asdict(entry)), encoding="utf-8")


def forget_chat_server(owner: int) -> None:
    """This chat stopped its server itself: nothing is left to reap."""
    _chat_record(owner).unlink(missing_ok=True)


def leftover_chat_servers() -> list[ChatServer]:
    """The recorded servers of chats that are no longer running (nothing is changed)."""
    return [entry for _, entry in _dead_chats()]


def _dead_chats() -> list[tuple[Path, ChatServer]]:
    folder = state_dir() / _CHATS
    dead = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            entry = ChatServer(int(data["owner"]), int(data["server"]), str(data["directory"]))
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if not _alive(entry.owner):
            dead.append((path, entry))
    return dead


def reap_chat_servers() -> list[ChatServer]:
    """Stop the servers and remove the directories of chats that died; return them.

    A server is only signalled when its command line names its recorded directory, so
    a recycled pid of an unrelated process is never touched.
    """
    reaped = []
    for path, entry in _dead_chats():
        if _runs_in(entry.server, entry.directory):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(entry.server, signal.SIGKILL)
            _wait_gone(entry.server, entry.directory)
        directory = Path(entry.directory)
        if directory.name.startswith(CHAT_NATS_PREFIX):
            shutil.rmtree(directory, ignore_errors=True)
        path.unlink(missing_ok=True)
        reaped.append(entry)
    return reaped


def _wait_gone(pid: int, directory: str, attempts: int = 500) -> None:
    """Wait (5 s at most) until the killed server no longer writes into its directory."""
    for _ in range(attempts):
        if not _runs_in(pid, directory):
            return
        time.sleep(0.01)
