"""Partition ownership in one process: leases, the consumer reset, fencing, and the
(a crashed ownership loop: tests/bus/test_crashes.py). The multi-process
failover tests are in tests/scale/."""

from __future__ import annotations

import asyncio
import json

from nats.aio.client import Client
from nats.js.api import ConsumerConfig
from nats.js.client import JetStreamContext

from ore_core.artifacts import Text
from ore_core.bus.cluster.ownership import Ownership, ensure_workers_bucket
from ore_core.bus.egress.egress import Egress
from ore_core.bus.egress.pipeline import Pipeline
from ore_core.bus.server.streams import BusConfig, consumer_name, ensure_streams, reset_consumer
from ore_core.bus.service import CoreService
from ore_core.events import LifecycleEvent, TurnCompleteEvent
from ore_core.ledger.thread import Thread
from ore_core.subjects import NAMESPACE_KEY, Subjects, partition_of
from ore_core.turn import Role
from tests.bus import raw
from tests.bus.conftest import CoreFactory, Outbox

SUBJECTS = Subjects()


async def test_two_services_share_the_partitions_and_a_stopped_one_hands_them_over(
    start_core: CoreFactory, ore_nats_client: Client, outbox: Outbox
) -> None:
    first = await start_core()
    assert first.ownership.held() == list(range(raw.PARTITIONS))
    second = await start_core()

    await raw.wait_for(lambda: len(second.ownership.held()) == raw.PARTITIONS // 2)
    await raw.wait_for(lambda: len(first.ownership.held()) == raw.PARTITIONS // 2)
    assert set(first.ownership.held()).isdisjoint(second.ownership.held())
    for thread in ("a", "b", "c", "d", "e", "f"):
        await raw.publish(ore_nats_client, thread, raw.user_message("hi", f"{thread}-1"))
    for thread in ("a", "b", "c", "d", "e", "f"):
        await outbox.done(thread)

    await first.stop()
    await raw.wait_for(lambda: second.ownership.held() == list(range(raw.PARTITIONS)))
    await raw.publish(ore_nats_client, "a", raw.user_message("again", "a-2"))
    await outbox.done("a", 2)


async def three_messages_on_t1(
    nc: Client, config: BusConfig
) -> tuple[int, JetStreamContext.PullSubscription]:
    """Streams set up, m-1..m-3 published to thread t1: its partition and a pull
    subscription on that partition's consumer (a worker's view of it)."""
    js = nc.jetstream()
    await ensure_streams(js, SUBJECTS, config)
    for n in (1, 2, 3):
        await raw.publish(nc, "t1", raw.user_message(f"m{n}", f"m-{n}"))
    partition = partition_of("t1", raw.PARTITIONS)
    return partition, await js.pull_subscribe_bind(consumer_name(partition), stream="ORE_IN")


async def test_reset_consumer_redelivers_the_unacknowledged_message_first_at_once(
    ore_nats_client: Client,
) -> None:
    config = BusConfig(partitions=raw.PARTITIONS, ack_wait=30.0)
    js = ore_nats_client.jetstream()
    partition, sub = await three_messages_on_t1(ore_nats_client, config)
    first = await sub.fetch(1, timeout=5)
    assert json.loads(first[0].data)["id"] == "m-1"  # a worker took m-1, then died

    clean = await reset_consumer(js, SUBJECTS, config, 0 if partition else 1)
    assert clean is None  # nothing in flight elsewhere: left alone
    start = await reset_consumer(js, SUBJECTS, config, partition)
    assert start == first[0].metadata.sequence.stream

    sub = await js.pull_subscribe_bind(consumer_name(partition), stream="ORE_IN")
    again = await sub.fetch(3, timeout=5)  # no ack_wait: at once, in order
    assert [json.loads(m.data)["id"] for m in again] == ["m-1", "m-2", "m-3"]
    info = await js.consumer_info("ORE_IN", consumer_name(partition))
    assert isinstance(info.config, ConsumerConfig)
    # A later start of any worker keeps the reset consumer as it is.
    await ensure_streams(js, SUBJECTS, config)


async def test_a_thread_that_left_publishes_nothing_until_attached_again(
    ore_nats_client: Client,
) -> None:
    await ensure_streams(
        ore_nats_client.jetstream(), SUBJECTS, BusConfig(partitions=raw.PARTITIONS)
    )
    pipeline = Pipeline(ore_nats_client)
    await pipeline.start()
    egress = Egress(ore_nats_client, SUBJECTS, pipeline)
    egress.bind("t1", "raw")  # as ingress does for the thread's namespace
    await egress.emit("t1", LifecycleEvent(phase="done"))
    egress.release("t1")  # the partition moved to another worker
    await egress.emit("t1", LifecycleEvent(phase="cancelled"))  # its old stream, late
    await egress.prime("t1")  # attached here again
    await egress.emit("t1", LifecycleEvent(phase="done"))
    await pipeline.flush()
    phases = [e.get("phase") for e in await raw.stored_events(ore_nats_client, "t1")]
    assert phases == ["done", "done"]
    assert egress.refused == 1
    await pipeline.stop()


async def test_a_worker_whose_lease_is_overdue_neither_saves_nor_appends(
    start_core: CoreFactory, ore_nats_client: Client, outbox: Outbox
) -> None:
    service: CoreService = await start_core()
    await raw.publish(ore_nats_client, "t1", raw.user_message("hi", "m-1"))
    await outbox.done("t1")
    before = len(await raw.stored_events(ore_nats_client, "t1"))
    partition = partition_of("t1", raw.PARTITIONS)
    # As if the process had been paused past its lease: no renewal for lease_ttl.
    lease = service.ownership._leases[partition]
    lease.renewed -= service.config.lease_ttl
    assert not service.ownership.may_write(partition)

    stream = service.manager.get("t1")
    await stream.emit(LifecycleEvent(phase="done"))
    await asyncio.sleep(0.2)
    assert len(await raw.stored_events(ore_nats_client, "t1")) == before


async def test_the_next_owner_stores_an_answer_saved_but_never_stored_as_a_batch(
    ore_nats_client: Client,
) -> None:
    """An owner died between saving an answer and appending its turn's batch: the last
    stored batch is the previous turn's. Attaching the thread stores the answer once."""
    await ensure_streams(
        ore_nats_client.jetstream(), SUBJECTS, BusConfig(partitions=raw.PARTITIONS)
    )
    pipeline = Pipeline(ore_nats_client)
    await pipeline.start()
    thread = Thread("t1", metadata={NAMESPACE_KEY: "raw"})
    first = [thread.append(Role.USER, Text("q1"), event_id="m-1")]
    first.append(thread.append(Role.ASSISTANT, Text("a1")))
    dead = Egress(ore_nats_client, SUBJECTS, pipeline)  # the owner that died
    dead.bind("t1", "raw")
    done = LifecycleEvent(phase="done")
    await dead.emit_batch([("t1", TurnCompleteEvent(turn=t)) for t in first] + [("t1", done)])
    await pipeline.flush()
    question = thread.append(Role.USER, Text("q2"), event_id="m-2")
    answer = thread.append(Role.ASSISTANT, Text("a2"))  # saved; its batch never appended

    for _ in range(2):  # attached twice (a second takeover): stored once
        egress = Egress(ore_nats_client, SUBJECTS, pipeline)
        await egress.prime("t1", thread)
        await pipeline.flush()
    # The redelivered message is recognised as answered: a batch of its `done` alone.
    await egress.emit("t1", LifecycleEvent(phase="done"))
    await pipeline.flush()
    await Egress(ore_nats_client, SUBJECTS, pipeline).prime("t1", thread)  # a third owner
    await pipeline.flush()

    batches = await raw.stored_messages(ore_nats_client, "t1")
    kinds = [[e["kind"] for e in batch] for batch in batches]
    assert kinds == [
        ["turn_complete", "turn_complete", "lifecycle"],
        ["turn_complete", "text", "turn_complete", "lifecycle"],  # the whole message
        ["lifecycle"],
    ]
    assert [batches[1][0]["turn"]["id"], batches[1][2]["turn"]["id"]] == [question.id, answer.id]
    assert {e["context"]["provenance"] for e in batches[1]} == {"raw"}  # no stream: its NS
    await pipeline.stop()


async def test_a_first_answer_with_nothing_stored_is_stored_once(ore_nats_client: Client) -> None:
    await ensure_streams(
        ore_nats_client.jetstream(), SUBJECTS, BusConfig(partitions=raw.PARTITIONS)
    )
    pipeline = Pipeline(ore_nats_client)
    await pipeline.start()
    thread = Thread("t2", metadata={NAMESPACE_KEY: "raw"})
    question = thread.append(Role.USER, Text("q1"), event_id="m-1")
    answer = thread.append(Role.ASSISTANT, Text("a1"))
    for _ in range(2):
        await Egress(ore_nats_client, SUBJECTS, pipeline).prime("t2", thread)
        await pipeline.flush()
    events = await raw.stored_events(ore_nats_client, "t2")
    assert [(e["kind"], (e.get("turn") or {}).get("id")) for e in events] == [
        ("turn_complete", question.id),
        ("text", None),
        ("turn_complete", answer.id),
        ("lifecycle", None),
    ]
    await pipeline.stop()


async def test_a_starting_worker_counts_every_worker_and_lease_the_server_holds(
    ore_nats_client: Client,
) -> None:
    """The exact listing backs the watch's first read (whose "done" marker can come too
    early): a starting worker sees the other workers and leases the bucket holds."""
    config = BusConfig(partitions=raw.PARTITIONS)
    kv = await ensure_workers_bucket(ore_nats_client, config)
    for key, value in (("worker.w1", b"w1"), ("worker.w2", b"w2"), ("lease.3", b"w1")):
        await kv.put(key, value)
    await kv.put("worker.gone", b"x")
    await kv.delete("worker.gone")

    async def nothing(partition: int) -> None:
        return None

    ownership = Ownership(
        ore_nats_client,
        config,
        on_acquire=nothing,
        on_release=nothing,
        on_lost=nothing,
        worker_id="me",
    )
    await ownership._count_keys(asyncio.get_running_loop().time())
    assert ownership.live_workers() == 3  # w1, w2 and this one; not the deleted one
    assert set(ownership._holders) == {3}


async def test_a_reset_cut_between_delete_and_create_resumes_from_the_floor_it_found(
    ore_nats_client: Client,
) -> None:
    """A takeover's reset that timed out after deleting the durable is finished by the
    next try from the start it found, not from the beginning of the stream (which would
    replay every acknowledged message)."""
    config = BusConfig(partitions=raw.PARTITIONS, ack_wait=30.0)
    js = ore_nats_client.jetstream()
    partition, sub = await three_messages_on_t1(ore_nats_client, config)
    (done,) = await sub.fetch(1, timeout=5)
    await done.ack_sync()  # m-1 answered and acknowledged
    (taken,) = await sub.fetch(1, timeout=5)  # m-2 in flight when its worker died

    resume: dict[int, int] = {}
    start = await reset_consumer(js, SUBJECTS, config, partition, resume=resume)
    assert start == resume[partition] == taken.metadata.sequence.stream
    await js.delete_consumer("ORE_IN", consumer_name(partition))  # as if cut after the delete
    assert await reset_consumer(js, SUBJECTS, config, partition, resume=resume) == start

    sub = await js.pull_subscribe_bind(consumer_name(partition), stream="ORE_IN")
    again = await sub.fetch(3, timeout=5)
    assert [json.loads(m.data)["id"] for m in again] == ["m-2", "m-3"]
