"""Lists the modules of ore_core whose code runs in the core while one message goes from
the puller to its stored batch and its relayed copy: the files a reader opens to follow it.

Usage: `python bench/path_modules.py`. It starts a private nats-server and a
`CoreService` as `ore serve` has it (the default SQLite store, the echo processor) in
this process, links the thread's home `raw` to an endpoint of namespace `beta`, sends
two messages to warm up (first calls, imports, the link cache), then traces
(sys.setprofile, every thread) the third one from its publish until its stored batch
is on `ore.out.raw.T` and its relayed copy on `ore.out.beta.T`. The conduit side
(`ore_core/conduit/`) is left out: the message is published with plain nats-py, as a
conduit would.

The modules that ran are printed in three groups, and only the first is counted as the
message's path:
- path: the modules that do the message's work (pull, decode, hand to the thread's
  stream, run it, save it, store the batch, relay the copy, ack);
- data: faces (`__init__.py`, which only name what a package offers) and pure data
  definitions (events, turns, artifacts, ids, metadata, timestamps, the JSON codec's
  two names): a reader meets them as the types of what flows, not as steps;
- wire: `ore_core/_nats/`, ore's adapter of nats-py (parser, publishes, the codec of
  headers), read as the client library it wraps.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import threading
from pathlib import Path
from types import FrameType
from typing import Any

import nats

from ore_core.bus.server.embedded import EmbeddedNatsServer
from ore_core.bus.service import CoreService
from ore_core.session.echo import EchoProcessor
from ore_core.session.manager import Manager
from ore_core.session.stores.sqlite_store import SQLiteStore

PACKAGE = str(Path(__file__).resolve().parents[1] / "ore_core") + "/"
THREAD = "traced"
BETA = {"namespace": "beta", "key": "beta.channel", "value": "C-1"}
DATA = frozenset(
    {
        "events.py",
        "turn.py",
        "ids.py",
        "jsonutil.py",
        "ledger/meta.py",
        "ledger/clock.py",
        "artifacts/base.py",
        "artifacts/kinds.py",
        "artifacts/attachment.py",
    }
)
seen: set[str] = set()


def _profile(frame: FrameType, event: str, arg: Any) -> None:
    if event == "call" and frame.f_code.co_filename.startswith(PACKAGE):
        seen.add(frame.f_code.co_filename.removeprefix(PACKAGE))


def group(name: str) -> str:
    """`path`, `data` or `wire` (see the module docstring)."""
    if name.startswith("_nats/"):
        return "wire"
    if name in DATA or name.endswith("__init__.py"):
        return "data"
    return "path"


async def one_message(url: str, tmp: Path) -> None:
    manager = Manager(store=SQLiteStore(tmp / "threads.db"), processor=EchoProcessor())
    service = CoreService(manager, servers=[url], metrics=False)
    await service.start()
    nc = await nats.connect(url)
    try:
        for n in range(3):
            home, copy = asyncio.Event(), asyncio.Event()

            async def on_home(msg: Any, home: asyncio.Event = home) -> None:
                if msg.headers and "Nats-Sequence" in msg.headers and b'"done"' in msg.data:
                    home.set()

            async def on_copy(msg: Any, copy: asyncio.Event = copy) -> None:
                if msg.headers and "Nats-Sequence" in msg.headers:
                    copy.set()

            subs = [
                await nc.subscribe(f"ore.out.raw.{THREAD}", cb=on_home),
                await nc.subscribe(f"ore.out.beta.{THREAD}", cb=on_copy),
            ]
            body = b'{"kind":"user_message","id":"m%d","content":"hi","context":{}}' % n
            if n == 2:
                threading.setprofile(_profile)
                sys.setprofile(_profile)
            await nc.jetstream().publish(
                f"ore.in.raw.{THREAD}", body, headers={"Nats-Msg-Id": f"m{n}"}
            )
            await asyncio.wait_for(home.wait(), 30)
            if n:  # linked after the first message made the thread
                await asyncio.wait_for(copy.wait(), 30)
            sys.setprofile(None)
            threading.setprofile(None)  # type: ignore[arg-type]
            for sub in subs:
                await sub.unsubscribe()
            if n == 0:
                request = json.dumps({"thread": THREAD, "endpoint": BETA}).encode()
                reply = await nc.request("ore.admin.links.add", request, timeout=30)
                assert b'"error"' not in reply.data, reply.data
    finally:
        await nc.close()
        await service.stop()


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp, EmbeddedNatsServer(Path(tmp) / "nats") as server:
        asyncio.run(one_message(server.url, Path(tmp)))
    groups: dict[str, list[str]] = {"path": [], "data": [], "wire": []}
    for name in sorted(seen):
        groups[group(name)].append(name)
    for name, modules in groups.items():
        print(f"{name} ({len(modules)}):")
        for module in modules:
            print(f"  {module}")
    print(
        f"{len(groups['path'])} modules on the path "
        f"({len(seen)} with data definitions, faces and the wire)"
    )


if __name__ == "__main__":
    main()
