"""Lists the modules of ore_core whose code runs in the core while one message goes from
the puller to its stored batch (and its ack): the files a reader opens to follow it.

Usage: `python bench/path_modules.py`. It starts a private nats-server and a
`CoreService` with the echo processor in this process, sends a first message to warm
up, then traces (sys.setprofile, every thread) the second one from its publish to its
batch on `ore.out.raw.T`. The conduit side (`ore_core/conduit/`) is left out: the
message is published with plain nats-py, as a conduit would.
"""

from __future__ import annotations

import asyncio
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
from ore_core.session.stores.memory import MemoryStore

PACKAGE = str(Path(__file__).resolve().parents[1] / "ore_core") + "/"
seen: set[str] = set()


def _profile(frame: FrameType, event: str, arg: Any) -> None:
    if event == "call" and frame.f_code.co_filename.startswith(PACKAGE):
        seen.add(frame.f_code.co_filename.removeprefix(PACKAGE))


async def one_message(url: str) -> None:
    manager = Manager(store=MemoryStore(), processor=EchoProcessor())
    service = CoreService(manager, servers=[url], metrics=False)
    await service.start()
    nc = await nats.connect(url)
    try:
        for n, thread in enumerate(["warmup", "traced"]):
            got = asyncio.get_running_loop().create_future()

            async def on_out(msg: Any, got: asyncio.Future[None] = got) -> None:
                if b'"done"' in msg.data and not got.done():
                    got.set_result(None)

            sub = await nc.subscribe(f"ore.out.raw.{thread}", cb=on_out)
            body = b'{"kind":"user_message","id":"m%d","content":"hi","context":{}}' % n
            if thread == "traced":
                threading.setprofile(_profile)
                sys.setprofile(_profile)
            await nc.jetstream().publish(
                f"ore.in.raw.{thread}", body, headers={"Nats-Msg-Id": f"m{n}"}
            )
            await asyncio.wait_for(got, 30)
            sys.setprofile(None)
            threading.setprofile(None)  # type: ignore[arg-type]
            await sub.unsubscribe()
    finally:
        await nc.close()
        await service.stop()


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp, EmbeddedNatsServer(Path(tmp)) as server:
        asyncio.run(one_message(server.url))
    for name in sorted(seen):
        print(name)
    core = [name for name in seen if not name.startswith(("conduit/", "_nats/"))]
    folders = sorted({str(Path(name).parent) for name in seen})
    print(f"{len(seen)} modules ({len(core)} outside _nats/), in {len(folders)} folders")


if __name__ == "__main__":
    main()
