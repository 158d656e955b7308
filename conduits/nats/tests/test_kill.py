"""The bridge as a process, killed (kill -9) again and again under load.

Plain NATS systems ask with requests (JSON with an id) and ask again with the same id
when no reply comes, as a careful client of a bridge that may be restarting does. What
they count: every message answered with its own answer, each recorded once in its
thread, in order; and on `.out` every reply, in order, at least once (a reply published
just before a kill may be published again after it: the JSON names `in_reply_to`).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
from dataclasses import dataclass, field
from pathlib import Path

import nats
import pytest
from nats.aio.msg import Msg
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout

from ore_core import ConduitClient, Manager, Role
from ore_core.bus.server.streams import BusConfig
from ore_core.bus.service import CoreService
from ore_core.session.stores.memory import MemoryStore
from ore_core.testing.conduit_process import ConduitProcess
from ore_core.testing.processors import SlowEcho

pytestmark = [pytest.mark.asyncio, pytest.mark.slow]

CHANNELS = 10
MESSAGES = 5  # per channel, each asked once the previous one is answered
KILLS = int(os.environ.get("KILLS", "5"))
PATIENCE = 90.0  # seconds the whole load may take (bounds a hang)


@dataclass
class Tally:
    replies: dict[tuple[str, str], str] = field(default_factory=dict)  # (channel, id) -> text
    asked: int = 0  # requests, retries included
    out: dict[str, list[str]] = field(default_factory=dict)  # channel -> in_reply_to seen


async def converse(nc: nats.NATS, channel: int, tally: Tally, deadline: float) -> None:
    loop = asyncio.get_running_loop()
    for number in range(MESSAGES):
        text, message_id = f"c{channel} m{number}", f"m{number}"
        body = json.dumps({"text": text, "id": message_id}).encode()
        while loop.time() < deadline:
            tally.asked += 1
            try:
                reply = await nc.request(f"bridge.c{channel}.in", body, timeout=3)
            except (NatsTimeout, NoRespondersError):
                await asyncio.sleep(0.1)  # the bridge is away: ask again, same id
                continue
            answer = json.loads(reply.data)
            if "text" in answer:
                tally.replies[(f"c{channel}", message_id)] = answer["text"]
                break
            await asyncio.sleep(0.1)  # an error reply (no answer in time...): ask again


async def test_a_bridge_killed_again_and_again_answers_every_request_once(
    ore_nats_url: str, tmp_path: Path
) -> None:
    store = MemoryStore()
    core = CoreService(
        Manager(store, SlowEcho()),
        servers=[ore_nats_url],
        config=BusConfig(partitions=2),
        reconnect_wait=0.05,
    )
    await core.start()
    bridge = ConduitProcess(
        "nats",
        ore_nats_url,
        tmp_path / "bridge.log",
        {"output": "json"},
        env={"ORE_LOAD_PLUGINS": "ore-conduit-nats"},  # not the venv's test plugins
    )
    bridge.start()
    nc = await nats.connect(ore_nats_url)
    tally = Tally()

    async def on_out(msg: Msg) -> None:
        channel = msg.subject.split(".")[1]
        tally.out.setdefault(channel, []).append(json.loads(msg.data).get("in_reply_to"))

    await nc.subscribe("bridge.*.out", cb=on_out)
    rng = random.Random(int(os.environ.get("KILL_SEED", "3")))
    try:
        deadline = asyncio.get_running_loop().time() + PATIENCE
        load = asyncio.gather(*(converse(nc, c, tally, deadline) for c in range(CHANNELS)))
        for _ in range(KILLS):
            await asyncio.sleep(rng.uniform(0.3, 1.5))
            bridge.kill()
            bridge.start()
        await load
        async with await ConduitClient.connect(ore_nats_url, name="nats") as client:
            threads = {
                channel: (await client.lookup_or_create("nats.channel", channel))[0]
                for channel in {c for c, _ in tally.replies}
            }
            recorded = {
                channel: [
                    (t.event_id, t.role)
                    for t in await client.turns(thread_id)
                    if t.role in (Role.USER, Role.ASSISTANT)
                ]
                for channel, thread_id in threads.items()
            }
        # what `.out` got for the last replies may still be on its way
        await nc.flush()
    finally:
        await nc.close()
        await bridge.astop()
        await core.stop(grace=0)
        await store.close()

    wanted = {
        (f"c{c}", f"m{n}"): SlowEcho.answer(f"c{c} m{n}")
        for c in range(CHANNELS)
        for n in range(MESSAGES)
    }
    lost = [key for key in wanted if key not in tally.replies]
    wrong = [key for key, text in tally.replies.items() if wanted.get(key) != text]
    users = {c: [e for e, role in turns if role == Role.USER] for c, turns in recorded.items()}
    doubled_turns = sum(len(events) - len(set(events)) for events in users.values())
    unanswered_turns = sum(
        sum(1 for _, role in turns if role == Role.USER)
        - sum(1 for _, role in turns if role == Role.ASSISTANT)
        for turns in recorded.values()
    )
    out_lost = sum(
        1 for (channel, message_id) in wanted if message_id not in tally.out.get(channel, [])
    )
    out_doubled = sum(len(seen) - len(set(seen)) for seen in tally.out.values())
    out_disorder = sum(
        1
        for seen in tally.out.values()
        if [m for i, m in enumerate(seen) if m not in seen[:i]] != sorted(set(seen))
    )
    print(
        f"\nbridge kill -9 x{KILLS}: sent {len(wanted)} (asked {tally.asked} times), "
        f"answered {len(tally.replies)}, lost {len(lost)}, wrong {len(wrong)}, "
        f"user turns doubled {doubled_turns}, unanswered {unanswered_turns}; "
        f".out lost {out_lost}, doubled {out_doubled}, channels out of order {out_disorder}"
    )
    assert bridge.starts == KILLS + 1
    assert (lost, wrong, doubled_turns, unanswered_turns) == ([], [], 0, 0)
    for channel, events in users.items():
        numbers = [int(e.rsplit("m", 1)[1]) for e in events]
        assert numbers == list(range(MESSAGES)), (channel, events)
    assert (out_lost, out_disorder) == (0, 0)
    assert out_doubled <= KILLS
