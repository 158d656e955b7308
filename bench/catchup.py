"""What catching up through the core costs: `events.read` pages against direct gets.

Run: `python bench/catchup.py [--events N] [--page N]`.

Since bus v2 a conduit reads stored events through `P.api.NS.events.read` (the core
reads `ORE_EVENTS` for it, so conduits need no JetStream permissions) instead of one
`$JS.API.STREAM.MSG.GET` per event. This stores N events of one thread and reads them
back both ways, on one embedded nats-server, and prints events per second.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time

import nats

from ore_core import ConduitClient, Manager
from ore_core._nats.codec import output_headers
from ore_core.artifacts import Text
from ore_core.bus.server.embedded import EmbeddedNatsServer
from ore_core.bus.server.streams import BusConfig
from ore_core.bus.service import CoreService
from ore_core.events import ArtifactEvent, EventContext, encode_event
from ore_core.session.echo import EchoProcessor
from ore_core.session.stores.memory import MemoryStore
from ore_core.subjects import Subjects


async def main(args: argparse.Namespace) -> None:
    subjects = Subjects()
    event = ArtifactEvent(artifact=Text("x" * 200), context=EventContext(provenance="bench"))
    data, subject = encode_event(event), subjects.events("bench", "t1")
    with EmbeddedNatsServer(tempfile.mkdtemp(prefix="ore-catchup-")) as server:
        async with Manager(MemoryStore(), EchoProcessor()) as manager:
            core = CoreService(manager, servers=[server.url], config=BusConfig(partitions=1))
            await core.start()
            nc = await nats.connect(server.url)
            js = nc.jetstream()
            for _ in range(args.events):
                await js.publish(subject, data, headers=output_headers(event))
            client = await ConduitClient.connect(server.url, name="bench")
            started = time.perf_counter()
            after, read = 0, 0
            while True:
                page = await client.read_events("t1", after=after, limit=args.page)
                read += len(page["events"])
                if page["next"] is None:
                    break
                after = page["next"]
            through_core = time.perf_counter() - started
            started = time.perf_counter()
            sequence, direct = 0, 0
            while True:
                try:
                    raw = await js.get_msg(
                        subjects.events_stream, seq=sequence + 1, subject=subject, next=True
                    )
                except nats.js.errors.NotFoundError:
                    break
                sequence, direct = int(raw.seq or 0), direct + 1
            by_get = time.perf_counter() - started
            await client.close()
            await nc.close()
            await core.stop(grace=0)
    assert read == direct == args.events, (read, direct)
    print(f"{args.events} stored events of one thread, page {args.page}")
    print(f"  events.read through the core  {args.events / through_core:10,.0f} events/s")
    print(f"  one MSG.GET per event         {args.events / by_get:10,.0f} events/s")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=5000)
    parser.add_argument("--page", type=int, default=200)
    asyncio.run(main(parser.parse_args()))
