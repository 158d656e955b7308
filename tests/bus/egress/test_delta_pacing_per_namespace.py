"""Live delta pacing is chosen per namespace: a web page's threads get text sooner.

Counted, not timed: the echo processor yields every word at the same moment, so a
namespace paced at 0 sees one `text_delta` per word, and one paced at an hour sees the
first word at once and the rest coalesced into one last delta when the answer ends.
"""

from __future__ import annotations

import asyncio
from collections import Counter

from nats.aio.client import Client
from nats.aio.msg import Msg

from ore_core import Manager
from ore_core.bus.server.streams import BusConfig
from ore_core.bus.service import CoreService
from ore_core.session.echo import EchoProcessor
from ore_core.session.stores.memory import MemoryStore
from tests.bus import raw

WORDS = "one two three four five six seven eight"
HOUR = 3600.0


async def test_each_namespace_gets_its_own_delta_pacing(
    ore_nats_url: str, ore_nats_client: Client
) -> None:
    deltas: Counter[str] = Counter()
    texts: dict[str, str] = {}
    done = {"web": asyncio.Event(), "slack": asyncio.Event()}

    async def receive(msg: Msg) -> None:
        namespace = msg.subject.split(".")[2]
        for event in raw.unpack(msg.data):
            if event["kind"] == "text_delta":
                deltas[namespace] += 1
            elif event["kind"] == "text":
                texts[namespace] = event["content"]
            elif event.get("phase") == "done":
                done[namespace].set()

    await ore_nats_client.subscribe("ore.out.*.*", cb=receive)
    manager = Manager(
        MemoryStore(), EchoProcessor(), delta_interval=HOUR, delta_intervals={"web": 0.0}
    )
    service = CoreService(
        manager, servers=[ore_nats_url], config=BusConfig(partitions=raw.PARTITIONS)
    )
    await service.start()
    try:
        for namespace in done:
            message = raw.user_message(WORDS, f"{namespace}-1", provenance=namespace)
            await raw.publish(ore_nats_client, f"{namespace}-t", message, namespace=namespace)
        async with asyncio.timeout(raw.TIMEOUT):
            for event in done.values():
                await event.wait()
    finally:
        await service.stop(grace=0)
    # The hour-paced one: the first word at once, the rest as one last chunk at the end.
    assert deltas == {"web": len(WORDS.split()), "slack": 2}
    assert texts == {"web": WORDS, "slack": WORDS}
