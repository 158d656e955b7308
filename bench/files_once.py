"""Files stored once (issue 39): N sends of the same file, and what the bucket holds.

Run: `python bench/files_once.py [--sends 100] [--size-mb 5]` (not a test)

One embedded nats-server, the core in this process (`CoreService`, memory store, echo
processor) and a conduit (`ConduitClient`): the conduit uploads the same random file
`--sends` times and sends each upload in a message of its own thread, then fetches it
once back. Printed: the bytes of the stream `OBJ_ORE_FILES` (chunks and descriptions,
as JetStream counts them) against the file's size, the objects stored, and the time of
the first upload against the others (an upload of stored bytes only asks `files.stat`).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import tempfile
import time
from pathlib import Path

import nats

from ore_core import ConduitClient, Manager
from ore_core._nats.object_store import object_stream
from ore_core.bus.server.embedded import EmbeddedNatsServer
from ore_core.bus.server.streams import BusConfig
from ore_core.bus.service import CoreService
from ore_core.session.echo import EchoProcessor
from ore_core.session.stores.memory import MemoryStore
from ore_core.subjects import Subjects


async def run(sends: int, size: int) -> None:
    data = os.urandom(size)
    bucket = Subjects().files_bucket
    with tempfile.TemporaryDirectory() as tmp:
        async with (
            EmbeddedNatsServer(Path(tmp) / "nats") as server,
            Manager(MemoryStore(), EchoProcessor()) as manager,
        ):
            service = CoreService(manager, servers=[server.url], config=BusConfig(partitions=1))
            await service.start()
            client = await ConduitClient.connect(server.url, name="bench")
            inspector = await nats.connect(server.url)
            try:
                thread, _ = await client.lookup_or_create("bench.files", "once")
                timings = []
                for index in range(sends):
                    started = time.perf_counter()
                    attachment = await client.upload(data, f"copy-{index}.bin", "image/png")
                    timings.append(time.perf_counter() - started)
                    await client.send(thread, f"copy {index}", attachments=[attachment])
                fetched = await client.fetch(thread, attachment)
                state = (await inspector.jetstream().stream_info(object_stream(bucket))).state
                objects = await (await inspector.jetstream().object_store(bucket)).list()
            finally:
                await inspector.close()
                await client.close()
                await service.stop(grace=0)
    print(f"sends: {sends} of one {size / 1e6:.1f} MB file ({size} bytes)")
    print(f"objects in {bucket}: {len(objects)}")
    print(f"stream {object_stream(bucket)}: {state.bytes} bytes in {state.messages} messages")
    print(f"stored / file size: {state.bytes / size:.4f} (1.0 = stored once, plus overhead)")
    print(
        f"first upload {timings[0] * 1000:.0f} ms; later uploads median "
        f"{sorted(timings[1:])[len(timings[1:]) // 2] * 1000:.1f} ms"
        if sends > 1
        else ""
    )
    same = hashlib.sha256(fetched).digest() == hashlib.sha256(data).digest()
    print(f"fetched back byte-identical: {same}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sends", type=int, default=100)
    parser.add_argument("--size-mb", type=float, default=5.0)
    args = parser.parse_args()
    asyncio.run(run(args.sends, int(args.size_mb * 1024 * 1024)))


if __name__ == "__main__":
    main()
