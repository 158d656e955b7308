"""The core's bus work per turn, counted: no task, queue or nats-py publish per message.

A turn of a thread whose stream is open is received by inline callbacks of the
connection's read loop (the ingress delivery and the stored batch's publish ack) and
published by `publish_now` (the live run, the stored batch, the ingress ack): no
subscription task or queue, no worker task of the partition, no coroutine chain of
nats-py's `publish`. Messages that need awaiting keep their partition's order.
Counts, never clocks (issue 11).
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from structlog.testing import capture_logs

from ore_core import (
    ArtifactEvent,
    EventContext,
    LifecycleEvent,
    Manager,
    OutputEvent,
    Role,
    Text,
    TextDelta,
    TurnCompleteEvent,
)
from ore_core._nats.connection import OreNatsClient, connect_nats
from ore_core.bus.cluster import ownership as ownership_module
from ore_core.bus.egress.egress import Egress
from ore_core.bus.egress.pipeline import Pipeline
from ore_core.bus.ingress import acks as acks_module
from ore_core.bus.ingress import decoding as decoding_module
from ore_core.bus.ingress import ingress as ingress_module
from ore_core.bus.ingress.puller import Puller
from ore_core.bus.server.streams import BusConfig, consumer_name, ensure_streams
from ore_core.bus.service import SERVING_GC_THRESHOLD, CoreService, run
from ore_core.ledger.thread import Thread
from ore_core.session.echo import EchoProcessor
from ore_core.session.stores.memory import MemoryStore
from ore_core.subjects import Subjects
from tests.bus import raw
from tests.bus.conftest import CoreFactory, Outbox

TURNS = 10


def count_publishes(nc: Client) -> list[str]:
    """Subjects published on `nc` through nats-py's `publish` from now on."""
    subjects: list[str] = []
    publish = nc.publish

    async def counted(subject: str, *args: Any, **kwargs: Any) -> None:
        subjects.append(subject)
        await publish(subject, *args, **kwargs)

    nc.publish = counted  # type: ignore[method-assign]
    return subjects


async def test_a_warm_thread_s_turns_start_no_bus_task_and_publish_past_nats_py(
    core: CoreService, ore_nats_client: Client, outbox: Outbox, tasks_started: list[str]
) -> None:
    nc = core.nc
    assert isinstance(nc, OreNatsClient)
    await raw.publish(ore_nats_client, "t-warm", raw.user_message("first", "m-0"))
    await outbox.done("t-warm")  # the thread is loaded, its stream open and primed
    tasks_started.clear()
    published = count_publishes(nc)

    for index in range(1, TURNS + 1):
        await raw.publish(ore_nats_client, "t-warm", raw.user_message(f"hi {index}", f"m-{index}"))
        await outbox.done("t-warm", count=index + 1)

    bus_tasks = [
        name
        for name in tasks_started
        if name.startswith(("Puller.", "Ingress.", "Pipeline.", "Egress.", "Subscription."))
    ]
    assert bus_tasks == [], "no task per message on the bus"
    turn_subjects = ("$JS.ACK.", "ore.ev.", "ore.out.", "$JS.API.CONSUMER.MSG.NEXT.")
    assert [s for s in published if s.startswith(turn_subjects)] == []
    # The deliveries and the publish acks are inline callbacks: nothing ever queues.
    inline = [nc._subs[sid] for sid in nc._inline]
    assert len(inline) == len(core.ingress.pulled) + 1  # one inbox per puller, the acks'
    for subscription in inline:
        assert subscription._wait_for_msgs_task is None
        assert subscription._pending_queue.qsize() == 0


async def test_a_warm_thread_s_turns_read_no_stream_sequence_and_check_no_namespace(
    core: CoreService,
    ore_nats_client: Client,
    outbox: Outbox,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The sequence only orders parked messages: a message that is not parked never needs
    # it. The namespace was found valid with the first message: it is not checked again.
    await raw.publish(ore_nats_client, "t-seq", raw.user_message("first", "m-0"))
    await outbox.done("t-seq")
    read: list[str | None] = []
    checked: list[str] = []
    stream_sequence = ingress_module.stream_sequence
    is_valid_namespace = decoding_module.is_valid_namespace

    def counted(msg: Msg) -> int:
        read.append(msg.reply)
        return stream_sequence(msg)

    def counted_check(namespace: str) -> bool:
        checked.append(namespace)
        return is_valid_namespace(namespace)

    monkeypatch.setattr(ingress_module, "stream_sequence", counted)
    monkeypatch.setattr(decoding_module, "is_valid_namespace", counted_check)
    for index in range(1, TURNS + 1):
        await raw.publish(ore_nats_client, "t-seq", raw.user_message(f"hi {index}", f"m-{index}"))
        await outbox.done("t-seq", count=index + 1)
    await raw.eventually(lambda: raw.all_acknowledged(ore_nats_client))
    assert read == []
    assert checked == []


async def test_the_core_receives_and_sends_the_same_messages_per_turn(
    start_core: CoreFactory, ore_nats_client: Client, outbox: Outbox
) -> None:
    core = await start_core()
    await raw.publish(ore_nats_client, "t-count", raw.user_message("first", "m-0"))
    await outbox.done("t-count")
    # A message is acknowledged after its stored batch's ack, which may come after a
    # reader sees its `done`: count from and to moments when every ack was sent.
    await raw.eventually(lambda: raw.all_acknowledged(ore_nats_client))
    stats = core.nc.stats
    before = dict(stats)
    for index in range(1, TURNS + 1):
        await raw.publish(ore_nats_client, "t-count", raw.user_message(f"hi {index}", f"m-{index}"))
        await outbox.done("t-count", count=index + 1)
    await raw.eventually(lambda: raw.all_acknowledged(ore_nats_client))
    received = stats["in_msgs"] - before["in_msgs"]
    sent = stats["out_msgs"] - before["out_msgs"]
    # Per turn: in, the delivery and the stored batch's ack; out, the live run, the
    # stored batch and the ingress ack. (Lease renewals may add a few of each.)
    assert 2 * TURNS <= received < 2 * TURNS + 10
    assert 3 * TURNS <= sent < 3 * TURNS + 10


def count_writes(nc: Client) -> list[int]:
    """The number of bytes of each write to `nc`'s socket from now on."""
    writes: list[int] = []
    transport = nc._transport
    assert transport is not None
    writelines, write = transport.writelines, transport.write

    def counted_lines(payload: list[bytes]) -> None:
        writes.append(sum(len(part) for part in payload))
        writelines(payload)

    def counted(payload: bytes) -> None:
        writes.append(len(payload))
        write(payload)

    transport.writelines = counted_lines  # type: ignore[method-assign]
    transport.write = counted  # type: ignore[method-assign]
    return writes


async def test_an_ack_rides_with_the_next_turn_s_output_not_in_a_write_of_its_own(
    start_core: CoreFactory,
    ore_nats_client: Client,
    outbox: Outbox,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Only the next write (or the stop) sends an ack: the count does not depend on how
    # quickly the next message comes.
    monkeypatch.setattr(acks_module, "ACK_LINGER", 3600.0)
    core = await start_core()
    await raw.publish(ore_nats_client, "t-writes", raw.user_message("first", "m-0"))
    await outbox.done("t-writes")
    writes = count_writes(core.nc)
    for index in range(1, TURNS + 1):
        await raw.publish(
            ore_nats_client, "t-writes", raw.user_message(f"hi {index}", f"m-{index}")
        )
        await outbox.done("t-writes", count=index + 1)
    # One write per turn: its live run and stored batch, with the previous turn's ack
    # (each turn's stored batch is written once its ack from the server came back, so
    # nothing else is pending then). Lease renewals may add a few writes.
    assert TURNS <= len(writes) < TURNS + 4
    await core.stop(grace=0)
    await raw.eventually(lambda: raw.all_acknowledged(ore_nats_client))  # the last one at the stop


async def pull_mixed(
    nc: Client, count: int, handle: Callable[[Msg], Awaitable[None] | None]
) -> Puller:
    await ensure_streams(nc.jetstream(), Subjects(), BusConfig(partitions=1))
    puller = Puller(nc, "ORE_IN", consumer_name(0), handle)
    await puller.start()
    for n in range(count):
        await nc.jetstream().publish("ore.in.raw.t1", str(n).encode())
    return puller


async def test_messages_handled_at_once_or_awaited_keep_the_delivery_order(
    ore_nats_url: str,
) -> None:
    nc = await connect_nats([ore_nats_url])
    handled: list[int] = []
    all_handled = asyncio.Event()

    async def slowly(n: int, msg: Msg) -> None:
        await asyncio.sleep(0.01)  # a thread to load: later messages arrive meanwhile
        record(n, msg)

    def record(n: int, msg: Msg) -> None:
        handled.append(n)
        msg._ackd = True  # not acked: the test only watches the order
        if len(handled) == 30:
            all_handled.set()

    def handle(msg: Msg) -> Awaitable[None] | None:
        n = int(msg.data)
        if n == 7:
            raise RuntimeError("a bug in the handler")
        if n % 5 == 0:
            return slowly(n, msg)
        record(n, msg)
        return None

    try:
        with capture_logs() as logs:
            puller = await pull_mixed(nc, 31, handle)
            await asyncio.wait_for(all_handled.wait(), raw.TIMEOUT)
            await puller.stop()
    finally:
        await nc.close()
    assert handled == [n for n in range(31) if n != 7]
    failures = [e for e in logs if e["event"] == "ingress handler failed"]
    assert len(failures) == 1
    assert puller._worker is None
    assert puller._backlog is None


async def test_a_warm_thread_s_partition_is_computed_once_for_the_fenced_store_and_egress(
    core: CoreService, ore_nats_client: Client, outbox: Outbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    await raw.publish(ore_nats_client, "t-fenced", raw.user_message("first", "m-0"))
    await outbox.done("t-fenced")
    computed: list[str] = []
    original = ownership_module.partition_of

    def counting(thread_id: str, partitions: int) -> int:
        computed.append(thread_id)
        return original(thread_id, partitions)

    monkeypatch.setattr(ownership_module, "partition_of", counting)
    for index in range(1, TURNS + 1):
        await raw.publish(
            ore_nats_client, "t-fenced", raw.user_message(f"hi {index}", f"m-{index}")
        )
        await outbox.done("t-fenced", count=index + 1)
    assert computed == []  # remembered since the first turn (2 saves, 2 batches each turn)
    assert core.ownership.may_write_thread("t-fenced")


def test_the_served_process_leaves_its_start_up_heap_out_of_collections(ore_nats_url: str) -> None:
    """`run` (what `ore serve` runs) freezes what start-up built: a full collection then
    walks only what serving made (the collector was ~13 % of the core's CPU per turn),
    and collects the young generation less often (`SERVING_GC_THRESHOLD`)."""
    frozen: list[int] = []
    thresholds: list[tuple[int, int, int]] = []

    @asynccontextmanager
    async def app() -> AsyncIterator[CoreService]:
        manager = Manager(MemoryStore(), EchoProcessor())
        yield CoreService(manager, servers=[ore_nats_url], config=BusConfig(partitions=4))

    def started(service: CoreService) -> None:
        frozen.append(gc.get_freeze_count())
        thresholds.append(gc.get_threshold())
        service.request_stop()

    before = gc.get_threshold()
    gc.unfreeze()
    try:
        assert run(app, started) == 0
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
    assert frozen
    assert frozen[0] > 10_000  # the imports, schemas and plugins of a started core
    assert thresholds == [(SERVING_GC_THRESHOLD, *before[1:])]
    assert before[0] < SERVING_GC_THRESHOLD


def _a_turn(thread: Thread, text: str, context: EventContext) -> list[OutputEvent]:
    """The events an echo turn emits, in order: 3 live, 4 stored."""
    user = thread.append(Role.USER, Text(text))
    answer = thread.append(Role.ASSISTANT, Text(text))
    return [
        TurnCompleteEvent.of(user, context),
        LifecycleEvent.of("submitted", context),
        LifecycleEvent.of("streaming", context),
        ArtifactEvent.of(TextDelta(text), context),
        ArtifactEvent.of(Text(text), context),
        TurnCompleteEvent.of(answer, context),
        LifecycleEvent.of("done", context),
    ]


async def test_the_egress_asks_ownership_once_per_thread_until_it_awaits(
    ore_nats_client: Client,
) -> None:
    """A batch's events of one thread are checked against the lease once, and a turn's
    `done` stores its batch on that answer (no await between: the same decision); after
    each stored batch (an await) the thread is asked again."""
    js = ore_nats_client.jetstream()
    await ensure_streams(js, raw.SUBJECTS, BusConfig(partitions=1))
    pipeline = Pipeline(ore_nats_client)
    await pipeline.start()
    asked: list[str] = []

    def may_write(thread_id: str) -> bool:
        asked.append(thread_id)
        return True

    egress = Egress(ore_nats_client, raw.SUBJECTS, pipeline, may_write=may_write)
    context = EventContext(provenance="raw")
    threads = {"t-a": Thread("t-a")}
    egress.bind("t-a", "raw")
    try:
        # The thread's first batch reads its last sequence first (an await): asked again.
        await egress.emit_batch([("t-a", e) for e in _a_turn(threads["t-a"], "one", context)])
        asked.clear()
        await egress.emit_batch([("t-a", e) for e in _a_turn(threads["t-a"], "two", context)])
        assert asked == ["t-a"]  # 7 events, one stored batch: asked once

        asked.clear()
        both: list[tuple[str, OutputEvent | None]] = [
            *(("t-a", e) for e in _a_turn(threads["t-a"], "three", context)),
            *(("t-a", e) for e in _a_turn(threads["t-a"], "four", context)),
        ]
        await egress.emit_batch(both)
        assert asked == ["t-a", "t-a"]  # asked again after the first turn's append
        async with asyncio.timeout(raw.TIMEOUT):
            await pipeline.flush()
    finally:
        await pipeline.stop()
    stored = await raw.stored_messages(ore_nats_client, "t-a")
    assert [[e["kind"] for e in batch] for batch in stored] == [
        ["turn_complete", "text", "turn_complete", "lifecycle"]
    ] * 4
    assert egress.emitted == 28
    assert egress.refused == 0


async def test_a_thread_whose_lease_is_overdue_stores_nothing_of_the_batch(
    ore_nats_client: Client,
) -> None:
    js = ore_nats_client.jetstream()
    await ensure_streams(js, raw.SUBJECTS, BusConfig(partitions=1))
    pipeline = Pipeline(ore_nats_client)
    await pipeline.start()
    overdue: list[tuple[str, int]] = []
    egress = Egress(ore_nats_client, raw.SUBJECTS, pipeline, may_write=lambda t: t != "t-z")
    egress.watch_overdue(lambda thread_id, position: overdue.append((thread_id, position)))
    context = EventContext(provenance="raw")
    for thread_id in ("t-y", "t-z"):
        egress.bind(thread_id, "raw")
    y, z = (_a_turn(Thread(thread_id), "hi", context) for thread_id in ("t-y", "t-z"))
    try:
        await egress.emit_batch(
            [item for a, b in zip(y, z, strict=True) for item in (("t-y", a), ("t-z", b))]
        )
        async with asyncio.timeout(raw.TIMEOUT):
            await pipeline.flush()
    finally:
        await pipeline.stop()
    assert overdue == [("t-z", 1)]  # the sink position of its first event
    assert await raw.stored_messages(ore_nats_client, "t-z") == []
    assert [len(batch) for batch in await raw.stored_messages(ore_nats_client, "t-y")] == [4]
    assert egress.refused == 7


async def test_binding_a_thread_again_in_its_namespace_computes_no_subject(
    ore_nats_client: Client,
) -> None:
    computed: list[tuple[str, str]] = []

    class CountingSubjects(Subjects):
        def events(self, namespace: str, thread_id: str) -> str:
            computed.append((namespace, thread_id))
            return super().events(namespace, thread_id)

    subjects = CountingSubjects()
    egress = Egress(ore_nats_client, subjects, Pipeline(ore_nats_client))
    for namespace in ("raw", "raw", "raw", "slack", "slack", "raw"):
        egress.bind("t-ns", namespace)
    assert computed == [("raw", "t-ns"), ("slack", "t-ns"), ("raw", "t-ns")]
    assert egress._subjects_of("t-ns")[:2] == (
        Subjects().events("raw", "t-ns"),
        Subjects().output("raw", "t-ns"),
    )
