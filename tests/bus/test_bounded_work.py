"""Bounded work per message: a huge message neither floods deltas nor stalls other threads."""

from __future__ import annotations

import asyncio

from nats.aio.client import Client
from nats.aio.msg import Msg

from ore_core import Manager
from ore_core.bus.server.streams import BusConfig
from ore_core.bus.service import CoreService
from ore_core.session.echo import EchoProcessor
from ore_core.session.stores.memory import MemoryStore
from tests.bus import raw

BIG = 900 * 1024


async def test_a_900_kb_echo_is_paced_and_does_not_hold_up_another_thread(
    ore_nats_url: str, ore_nats_client: Client
) -> None:
    arrivals: list[tuple[str, str]] = []  # (thread, kind or lifecycle phase), in order
    big_started = asyncio.Event()
    big_done = asyncio.Event()
    deltas: list[int] = []

    async def receive(msg: Msg) -> None:
        thread_id = msg.subject.rpartition(".")[2]
        for event in raw.unpack(msg.data):
            kind = event.get("phase", event["kind"])
            arrivals.append((thread_id, kind))
            if thread_id == "big" and event["kind"] == "text_delta":
                deltas.append(len(event["content"].encode()))
            if (thread_id, kind) == ("big", "streaming"):
                big_started.set()
            if (thread_id, kind) == ("big", "done"):
                big_done.set()

    await ore_nats_client.subscribe("ore.out.raw.*", cb=receive)
    manager = Manager(MemoryStore(), EchoProcessor(), delta_interval=0.1, delta_max_bytes=4096)
    service = CoreService(
        manager, servers=[ore_nats_url], config=BusConfig(partitions=raw.PARTITIONS)
    )
    await service.start()
    try:
        words = ("word " * (BIG // 5))[:BIG]
        await raw.publish(ore_nats_client, "big", raw.user_message(words, "big-1"))
        # Published while the big turn runs (once it streams: a new thread's first
        # message may be loaded later than one published after it, on another partition).
        await asyncio.wait_for(big_started.wait(), 60)
        await raw.publish(ore_nats_client, "small", raw.user_message("hi", "small-1"))
        await asyncio.wait_for(big_done.wait(), 60)
        await asyncio.sleep(0.2)
    finally:
        await service.stop(grace=0)
    small_done = arrivals.index(("small", "done"))
    big_started = arrivals.index(("big", "streaming"))
    print(f"\n900 KB echo: {len(deltas)} delta messages, largest {max(deltas)} bytes")
    assert big_started < small_done < arrivals.index(("big", "done"))
    # Paced: 184,320 words go as a few hundred messages (one per `delta_interval` or per
    # 4 KB, however fast the machine streams), never one message per word.
    assert len(deltas) < len(words.split()) // 100
    assert max(deltas) <= 4096
