"""A relay (`answer = "none"`) whose owner died between saving a message and storing it.

A relay's message stores its user turn alone (no answer follows), so the next owner
cannot tell a lost batch by a missing answer: it looks for the latest user turn in the
last stored batch. Found by tests/scale/test_bridge_workers.py (a message in the
ledger that no endpoint ever showed).
"""

from __future__ import annotations

from nats.aio.client import Client

from ore_core.artifacts import Text
from ore_core.bus.egress.egress import Egress
from ore_core.bus.egress.pipeline import Pipeline
from ore_core.bus.server.streams import BusConfig, ensure_streams
from ore_core.endpoint import GATEWAY_ANSWER_KEY
from ore_core.events import LifecycleEvent, TurnCompleteEvent
from ore_core.ledger.thread import Thread
from ore_core.subjects import NAMESPACE_KEY, Subjects
from ore_core.turn import Role
from tests.bus import raw

SUBJECTS = Subjects()


async def relay_with_one_stored_message(nc: Client) -> tuple[Pipeline, Thread]:
    await ensure_streams(nc.jetstream(), SUBJECTS, BusConfig(partitions=raw.PARTITIONS))
    pipeline = Pipeline(nc)
    await pipeline.start()
    thread = Thread("t1", metadata={NAMESPACE_KEY: "raw", GATEWAY_ANSWER_KEY: "none"})
    first = thread.append(Role.USER, Text("q1"), event_id="m-1")
    dead = Egress(nc, SUBJECTS, pipeline)  # the owner that dies
    dead.bind("t1", "raw")
    done = LifecycleEvent(phase="done")
    await dead.emit_batch([("t1", TurnCompleteEvent(turn=first)), ("t1", done)])
    await pipeline.flush()
    return pipeline, thread


async def test_the_next_owner_stores_a_relayed_message_saved_but_never_stored_once(
    ore_nats_client: Client,
) -> None:
    pipeline, thread = await relay_with_one_stored_message(ore_nats_client)
    second = thread.append(Role.USER, Text("q2"), event_id="m-2")  # saved, never stored
    for _ in range(2):  # attached twice (a second takeover): stored once
        await Egress(ore_nats_client, SUBJECTS, pipeline).prime("t1", thread)
        await pipeline.flush()

    batches = await raw.stored_messages(ore_nats_client, "t1")
    assert [[e["kind"] for e in batch] for batch in batches] == [
        ["turn_complete", "lifecycle"],
        ["turn_complete", "lifecycle"],  # the message the dead owner saved
    ]
    assert batches[1][0]["turn"]["id"] == second.id
    await pipeline.stop()


async def test_the_next_owner_stores_nothing_again_for_a_relay_whose_messages_are_stored(
    ore_nats_client: Client,
) -> None:
    pipeline, thread = await relay_with_one_stored_message(ore_nats_client)
    await Egress(ore_nats_client, SUBJECTS, pipeline).prime("t1", thread)
    await pipeline.flush()

    assert len(await raw.stored_messages(ore_nats_client, "t1")) == 1
    await pipeline.stop()
