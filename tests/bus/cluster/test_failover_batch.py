"""A worker died between saving an answer and storing its batch: the worker that takes
the thread over stores exactly the batch the dead one would have stored (every durable
event of that message, with the message's context), and nothing more.

The dead worker's state is made directly: its save is in the store, its message is in
`ORE_IN` unacknowledged, nothing of it is on `P.ev.T`.
"""

from __future__ import annotations

from typing import Any

from nats.aio.client import Client

from ore_core import Role, Text
from ore_core.session.stores import MemoryStore
from ore_core.turn import turn_to_dict
from tests.bus import raw
from tests.bus.conftest import CoreFactory

CONTEXT = {
    "provenance": "raw",
    "user": "U1",
    "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
}


def message(msg_id: str) -> dict[str, Any]:
    return {**raw.user_message("hello", msg_id), "context": CONTEXT}


def shape(batch: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A batch without what differs between two messages of the same text: turn ids,
    parents, timestamps and event ids."""
    shaped = []
    for event in batch:
        event = dict(event)
        if "turn" in event:
            turn = dict(event["turn"])
            for key in ("id", "parent_id", "timestamp"):
                turn.pop(key, None)
            turn["metadata"] = {
                k: v for k, v in turn.get("metadata", {}).items() if k != "event_id"
            }
            event["turn"] = turn
        shaped.append(event)
    return shaped


async def test_the_next_owner_stores_the_batch_the_dead_owner_would_have_stored(
    start_core: CoreFactory, store: MemoryStore, ore_nats_client: Client
) -> None:
    first = await start_core()
    await raw.publish(ore_nats_client, "t1", message("m-1"))
    await raw.eventually(lambda: _count(ore_nats_client, "t1", 1))
    await first.stop()
    [normal] = await raw.stored_messages(ore_nats_client, "t1")

    # The owner that died: "m-2" recorded and answered in the store, no batch, no ack.
    thread = await store.get("t1")
    user = thread.append(Role.USER, Text("hello"), event_id="m-2")
    answer = thread.append(Role.ASSISTANT, Text("hello"))
    await store.save(thread)
    await raw.publish(ore_nats_client, "t1", message("m-2"))

    await start_core()  # takes the thread over; "m-2" comes to it again
    await raw.eventually(lambda: _count(ore_nats_client, "t1", 2))
    recovered = (await raw.stored_messages(ore_nats_client, "t1"))[1]

    assert shape(recovered) == shape(normal)
    assert [e.get("turn") for e in recovered if e["kind"] == "turn_complete"] == [
        turn_to_dict(user),
        turn_to_dict(answer),
    ]
    assert all(e["context"] == CONTEXT for e in recovered)
    await raw.eventually(lambda: raw.all_acknowledged(ore_nats_client))  # "m-2" is handled
    assert len(await raw.stored_messages(ore_nats_client, "t1")) == 2  # its `done` was in it


async def _count(nc: Client, thread_id: str, count: int) -> bool:
    return len(await raw.stored_messages(nc, thread_id)) >= count
