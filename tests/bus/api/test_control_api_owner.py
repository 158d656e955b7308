"""The control API of two workers: a request about a thread is answered by its owner.

Two real CoreServices on one nats-server share one store. The owner's micro service is
stopped (its forwarded-request subject stays), so every control-API request reaches the
other worker, which must relay the ones about the owner's threads.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from nats.aio.client import Client

from ore_core.bus.service import CoreService
from ore_core.subjects import partition_of
from tests.bus import raw
from tests.bus.conftest import CoreFactory, Outbox


async def call(nc: Client, method: str, body: dict[str, Any]) -> dict[str, Any]:
    reply = await nc.request(f"ore.api.raw.{method}", json.dumps(body).encode(), timeout=10)
    answer: dict[str, Any] = json.loads(reply.data)
    return answer


async def two_workers(start_core: CoreFactory) -> tuple[CoreService, CoreService]:
    first = await start_core(worker_id="w1")
    second = await start_core(worker_id="w2")
    await raw.wait_for(lambda: bool(second.ownership.held()) and bool(first.ownership.held()))
    return first, second


async def stop_service(worker: CoreService) -> None:
    """Stop the worker's micro service; requests forwarded to it are still answered."""
    control = worker._control
    assert control is not None
    assert control._service is not None
    await control._service.stop()


def owned_by(worker: CoreService) -> str:
    """A thread id whose partition `worker` holds."""
    held = set(worker.ownership.held())
    return next(f"t{n}" for n in range(1000) if partition_of(f"t{n}", raw.PARTITIONS) in held)


async def answered_by_owner(
    start_core: CoreFactory, nc: Client, outbox: Outbox
) -> tuple[CoreService, CoreService, str]:
    """Two workers (`other`, `owner`) and a thread of `owner`'s with one answered turn,
    once `other` knows who owns it."""
    other, owner = await two_workers(start_core)
    thread_id = owned_by(owner)
    await raw.publish(nc, thread_id, raw.user_message("hi", "m-1"))
    await outbox.done(thread_id)
    await raw.wait_for(lambda: other.ownership.other_holder(thread_id) == "w2")
    return other, owner, thread_id


async def test_a_write_reaching_another_worker_goes_through_the_owner_s_live_stream(
    start_core: CoreFactory, ore_nats_client: Client, outbox: Outbox
) -> None:
    other, owner, thread_id = await answered_by_owner(start_core, ore_nats_client, outbox)
    await stop_service(owner)  # requests now reach `other` only

    reply = await call(
        ore_nats_client, "threads.meta.set", {"id": thread_id, "key": "title", "value": "x"}
    )
    assert reply["metadata"]["title"] == "x"
    await outbox.until(lambda: any(e["kind"] == "properties" for e in outbox.events(thread_id)))
    assert owner.manager.get(thread_id).get_metadata("title") == "x"  # its live copy
    assert other.manager.stream_of(thread_id) is None  # no copy kept elsewhere


async def test_a_lookup_answered_by_a_worker_that_does_not_own_the_thread_keeps_no_stream(
    start_core: CoreFactory, ore_nats_client: Client
) -> None:
    other, owner = await two_workers(start_core)
    await stop_service(owner)
    for n in range(8):
        found = await call(ore_nats_client, "threads.lookup", {"key": "raw.chan", "value": f"{n}"})
        assert found["created"]
    assert other.manager.list() == []  # answered by `other`, which attached nothing


async def test_a_request_whose_owner_does_not_answer_is_answered_from_the_store(
    start_core: CoreFactory, ore_nats_client: Client, outbox: Outbox
) -> None:
    _other, owner, thread_id = await answered_by_owner(start_core, ore_nats_client, outbox)
    assert owner._control is not None
    await owner._control.stop()  # neither its service nor its forwarded requests answer

    described = await call(ore_nats_client, "threads.get", {"id": thread_id})
    assert (described["id"], described["turns"]) == (thread_id, 2)


async def test_a_change_to_an_idle_thread_is_announced_by_its_owner(
    start_core: CoreFactory, ore_nats_client: Client, outbox: Outbox
) -> None:
    # A conduit that sets a title just after sending may reach the owner before its
    # message does: the thread is stored but idle. The change must still be announced.
    other, owner = await two_workers(start_core)
    thread_id = owned_by(owner)
    created = await call(ore_nats_client, "threads.create", {"id": thread_id})
    assert created["id"] == thread_id
    assert owner.manager.stream_of(thread_id) is None

    await call(ore_nats_client, "threads.meta.set", {"id": thread_id, "key": "title", "value": "x"})
    await outbox.until(lambda: any(e["kind"] == "properties" for e in outbox.events(thread_id)))
    assert owner.manager.get(thread_id).get_metadata("title") == "x"
    assert other.manager.stream_of(thread_id) is None


async def test_a_message_racing_a_change_to_its_idle_thread_is_stored_and_answered(
    start_core: CoreFactory, ore_nats_client: Client, outbox: Outbox
) -> None:
    # The change attaches the thread's stream before the message does (a conduit sets
    # a title while its message is on its way): counted over many threads, every
    # message's user turn and answer must be stored, none lost to the fence.
    await start_core(worker_id="w1")
    threads = [f"race{n}" for n in range(60)]
    for thread_id in threads:
        await call(ore_nats_client, "threads.create", {"id": thread_id})
    for thread_id in threads:
        await asyncio.gather(
            call(ore_nats_client, "threads.meta.set", {"id": thread_id, "key": "k", "value": "v"}),
            raw.publish(ore_nats_client, thread_id, raw.user_message("hi", f"m-{thread_id}")),
        )
    for thread_id in threads:
        await outbox.done(thread_id)
    lost = [
        thread_id
        for thread_id in threads
        if [
            e["turn"]["role"]
            for e in await raw.stored_events(ore_nats_client, thread_id)
            if e["kind"] == "turn_complete"
        ]
        != ["user", "assistant"]
    ]
    assert lost == []
