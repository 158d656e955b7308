"""Every append to `P.ev.T` is fenced by the server: `Nats-Expected-Last-Subject-Sequence`.

A worker whose lease check passed while another worker already took its thread over (a
pause between the check and the publish) must not store its batch: the server refuses
it (the subject's last sequence is the other writer's), nothing of it is stored, and
the worker hands the thread's messages back as for an overdue lease. Real parts: the
kit's nats-server, Pipelines and Egresses on their own connections, the CoreService.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path

import nats
import pytest
from nats.aio.client import Client
from nats.js.api import DiscardPolicy, StreamConfig

from ore_core import ConduitClient, Role, Text
from ore_core._nats.wire import header_block
from ore_core.bus.egress.egress import Egress, EventsNotRead
from ore_core.bus.egress.pipeline import Pipeline
from ore_core.bus.server.embedded import EmbeddedNatsServer
from ore_core.bus.server.streams import BusConfig, ensure_streams
from ore_core.events import LifecycleEvent, TurnCompleteEvent
from ore_core.ledger.thread import Thread
from ore_core.session.protocols import Store
from ore_core.session.stores.memory import MemoryStore
from ore_core.session.stores.wrapper import StoreWrapper
from ore_core.subjects import partition_of
from tests.bus import raw
from tests.bus.cluster.test_lease_blip import acknowledged, dones_or_timeout, send_all, tally
from tests.bus.conftest import CoreFactory, Outbox

HEADER = header_block({"Ore-Kind": "batch"})


async def fence_stream(nc: Client) -> None:
    await nc.jetstream().add_stream(StreamConfig(name="FEN", subjects=["fen.*"]))


async def stored_on(nc: Client, subject: str) -> list[bytes]:
    """The payloads stored on `subject` of stream FEN, in order."""
    js = nc.jetstream()
    state = (await js.stream_info("FEN")).state
    found = []
    for seq in range(state.first_seq, state.last_seq + 1):
        msg = await js.get_msg("FEN", seq)
        if msg.subject == subject:
            found.append(msg.data or b"")
    return found


async def test_an_append_after_another_writers_is_refused_with_the_rest_of_its_subject(
    ore_nats_client: Client, ore_nats_url: str
) -> None:
    await fence_stream(ore_nats_client)
    other_nc = await nats.connect(ore_nats_url)
    stale, owner = Pipeline(ore_nats_client), Pipeline(other_nc)
    await stale.start()
    await owner.start()
    refused: list[tuple[str, int]] = []
    stale.watch_fenced(lambda subject, tag: refused.append((subject, tag)))
    try:
        stale.know("fen.a", 0)
        await stale.publish_fenced("FEN", "fen.a", b"stale 1", HEADER, 1)
        await stale.flush()
        owner.know("fen.a", 1)  # the new owner read the subject's last sequence
        await owner.publish_fenced("FEN", "fen.a", b"owner 1", HEADER, 1)
        await owner.flush()
        # The stale worker, resumed: two more of the thread, and one of another thread.
        await stale.publish_fenced("FEN", "fen.a", b"stale 2", HEADER, 2)
        await stale.publish_fenced("FEN", "fen.a", b"stale 3", HEADER, 3)
        stale.know("fen.b", 0)
        await stale.publish_fenced("FEN", "fen.b", b"other thread", HEADER, 4)
        await stale.flush()
        await owner.publish_fenced("FEN", "fen.a", b"owner 2", HEADER, 2)
        await owner.flush()

        assert await stored_on(ore_nats_client, "fen.a") == [b"stale 1", b"owner 1", b"owner 2"]
        assert await stored_on(ore_nats_client, "fen.b") == [b"other thread"]
        assert refused == [("fen.a", 2)]  # once, with the tag of the first refused
        assert (stale.fenced, stale.lost, stale.pending) == (2, 0, 0)
        assert (owner.fenced, owner.lost) == (0, 0)
        assert not stale.knows("fen.a")  # read again before its next append
    finally:
        await stale.stop()
        await owner.stop()
        await other_nc.close()


async def test_a_read_older_than_the_pipeline_s_own_append_does_not_fence_it_out(
    ore_nats_client: Client,
) -> None:
    # The ingress primes a thread whose stream the control API attached: its read of
    # the subject's last sequence can start before a change announced meanwhile is
    # acknowledged, and arrive after. That read must not make the next append look
    # like another writer's (the message's batch was refused and lost).
    await fence_stream(ore_nats_client)
    pipeline = Pipeline(ore_nats_client)
    await pipeline.start()
    refused: list[tuple[str, int]] = []
    pipeline.watch_fenced(lambda subject, tag: refused.append((subject, tag)))
    try:
        pipeline.know("fen.a", 0)
        await pipeline.publish_fenced("FEN", "fen.a", b"properties", HEADER, 1)
        await pipeline.flush()
        pipeline.know("fen.a", 0)  # the primer's read, taken before that ack
        await pipeline.publish_fenced("FEN", "fen.a", b"the answer", HEADER, 2)
        await pipeline.flush()

        assert await stored_on(ore_nats_client, "fen.a") == [b"properties", b"the answer"]
        assert (refused, pipeline.fenced, pipeline.lost) == ([], 0, 0)
    finally:
        await pipeline.stop()


def stopped(pid: int) -> bool:
    """Whether every thread of process `pid` is stopped (SIGSTOP took effect)."""
    tasks = Path(f"/proc/{pid}/task")
    states = [(t / "stat").read_text().rpartition(")")[2].split()[0] for t in tasks.iterdir()]
    return all(state == "T" for state in states)


def sent_again(pipeline: Pipeline) -> bool:
    """Whether the pipeline's one message was sent a second time (its first ack missing)."""
    records = [*pipeline._pending.values(), *pipeline._retries, *pipeline._delayed]
    assert len(records) == 1, "the message was acknowledged: the server was not stopped"
    return records[0].attempts >= 2


async def test_a_retry_of_a_stored_message_is_taken_as_stored_not_as_another_writers(
    ore_nats_server: EmbeddedNatsServer, ore_nats_client: Client
) -> None:
    """The ack of a stored fenced message is lost (the server paused past the ack
    timeout) and it is sent again, with the same `Nats-Msg-Id` and expected sequence.
    nats-server checks the expected sequence before the msg-id: the retry is refused
    for a wrong last sequence, and the subject's last message, this one, says it was
    stored. Nothing is stored twice, nothing refused, and the next message expects it."""
    await fence_stream(ore_nats_client)
    pipeline = Pipeline(ore_nats_client, ack_timeout=0.5)
    await pipeline.start()
    refused: list[tuple[str, int]] = []
    pipeline.watch_fenced(lambda subject, tag: refused.append((subject, tag)))
    try:
        pipeline.know("fen.a", 0)
        os.kill(ore_nats_server.pid, signal.SIGSTOP)
        try:
            await raw.wait_for(lambda: stopped(ore_nats_server.pid))
            await pipeline.publish_fenced("FEN", "fen.a", b"one", HEADER, 1)
            await raw.wait_for(lambda: sent_again(pipeline))
        finally:
            os.kill(ore_nats_server.pid, signal.SIGCONT)
        await pipeline.flush()
        await pipeline.publish_fenced("FEN", "fen.a", b"two", HEADER, 2)  # expects the first's seq
        await pipeline.flush()

        assert await stored_on(ore_nats_client, "fen.a") == [b"one", b"two"]
        assert refused == []
        assert (pipeline.fenced, pipeline.lost) == (0, 0)
    finally:
        await pipeline.stop()


async def test_a_subject_emptied_meanwhile_is_appended_to_expecting_nothing(
    ore_nats_client: Client,
) -> None:
    """Its messages expired (`events_max_age`) or were purged: nobody else wrote it."""
    await fence_stream(ore_nats_client)
    pipeline = Pipeline(ore_nats_client)
    await pipeline.start()
    try:
        pipeline.know("fen.a", 0)
        await pipeline.publish_fenced("FEN", "fen.a", b"old", HEADER, 1)
        await pipeline.flush()
        await ore_nats_client.jetstream().purge_stream("FEN", subject="fen.a")
        await pipeline.publish_fenced("FEN", "fen.a", b"new", HEADER, 2)
        await pipeline.flush()
        assert await stored_on(ore_nats_client, "fen.a") == [b"new"]
        assert (pipeline.fenced, pipeline.lost) == (0, 0)
    finally:
        await pipeline.stop()


class Takeover(StoreWrapper):
    """`inner`, and after every `every`-th save (at most `limit` times) another worker
    takes the saved thread over before this one appends its turn: it attaches the thread
    as saved and stores the answer (as a next owner's `prime` does), then stops.

    This worker's lease stays valid: only the server's fence stops its append."""

    def __init__(self, inner: Store, ore_nats_url: str, every: int, limit: int) -> None:
        super().__init__(inner)
        self.url = ore_nats_url
        self.every = every
        self.limit = limit
        self.saves = 0
        self.takeovers = 0
        self.msg_ids: set[str] = set()

    async def save(self, thread: Thread) -> None:
        await self.inner.save(thread)
        self.saves += 1
        if self.saves % self.every or self.takeovers >= self.limit:
            return
        self.takeovers += 1
        nc = await nats.connect(self.url)
        pipeline = Pipeline(nc)
        await pipeline.start()
        try:
            await Egress(nc, raw.SUBJECTS, pipeline).prime(thread.id, thread)
            await pipeline.flush()
            assert pipeline.fenced == pipeline.lost == 0
        finally:
            await pipeline.stop()
            await nc.close()

    async def close(self) -> None:
        """The wrapped store is the test's."""


async def test_a_worker_whose_thread_was_taken_over_stores_nothing_and_answers_once(
    start_core: CoreFactory,
    store: MemoryStore,
    ore_nats_client: Client,
    ore_nats_url: str,
    outbox: Outbox,
) -> None:
    takeover = Takeover(store, ore_nats_url, every=4, limit=3)
    core = await start_core(store=takeover)
    threads = await send_all(ore_nats_client)
    await raw.eventually(lambda: acknowledged(ore_nats_client))
    await dones_or_timeout(outbox, threads)
    counts = await tally(ore_nats_client, outbox, threads)
    pipeline = core._pipeline
    print(f"\ntakeovers={takeover.takeovers} fenced={pipeline.fenced if pipeline else 0} {counts}")
    assert takeover.takeovers == 3
    assert pipeline is not None
    assert pipeline.fenced >= 3  # each stale append refused
    assert pipeline.lost == 0
    assert counts.lost == counts.doubled == counts.out_of_order == []
    assert counts.answered == counts.done_seen == counts.sent


async def test_a_properties_event_on_a_thread_never_attached_here_is_stored(
    start_core: CoreFactory, ore_nats_client: Client, ore_nats_url: str, outbox: Outbox
) -> None:
    """Set through the control API on an idle thread this worker never primed, whose
    events another worker stored before: its last sequence is read first (one direct
    get), never guessed (a guessed 0 would be refused)."""
    core = await start_core()
    client = await ConduitClient.connect(ore_nats_url, name="raw", request_timeout=30.0)
    async with client:
        await client.create_thread("t-idle")
        await core.manager.attach("t-idle")  # active here (its owner), never primed
        other = Pipeline(ore_nats_client)
        await other.start()
        earlier = Egress(ore_nats_client, raw.SUBJECTS, other)  # a worker that wrote it before
        earlier.bind("t-idle", "raw")
        await earlier.emit("t-idle", LifecycleEvent(phase="done"))
        await other.stop()
        before = [e["kind"] for e in await raw.stored_events(ore_nats_client, "t-idle")]

        await client.set_metadata("t-idle", "title", "greeting")
        await outbox.until(lambda: len(outbox.stored("t-idle")) == len(before) + 1)
    kinds = [e["kind"] for e in await raw.stored_events(ore_nats_client, "t-idle")]
    assert kinds == [*before, "properties"]
    assert before[-1] == "lifecycle"
    assert core._pipeline is not None
    assert core._pipeline.fenced == 0


async def test_a_thread_attached_again_while_its_batch_is_held_stores_its_answer_once(
    ore_nats_client: Client,
) -> None:
    """The thread left and came back (a lease lost and taken again while a NATS node was
    down) while its last batch was still on its way: attaching it reads that batch
    first, so the answer in it is not taken for missing and stored a second time."""
    js = ore_nats_client.jetstream()
    await ensure_streams(js, raw.SUBJECTS, BusConfig(partitions=1))
    pipeline = Pipeline(ore_nats_client, hold_retry=0.05)
    await pipeline.start()
    egress = Egress(ore_nats_client, raw.SUBJECTS, pipeline)
    egress.bind("t-held", "raw")
    thread = Thread("t-held")
    try:
        for n in (1, 2):
            thread.append(Role.USER, Text(f"hi {n}"))
            answer = thread.append(Role.ASSISTANT, Text(f"answer {n}"))
            events = [TurnCompleteEvent(turn=answer), LifecycleEvent(phase="done")]
            if n == 2:  # the stream is full: the second batch is held and sent again
                config = (await js.stream_info(raw.SUBJECTS.events_stream)).config
                await js.update_stream(replace(config, max_msgs=1, discard=DiscardPolicy.NEW))
            await egress.emit_batch([("t-held", event) for event in events])
            if n == 1:
                await pipeline.flush()
        await raw.wait_for(lambda: pipeline.full is not None)

        egress.release("t-held")
        attach = asyncio.ensure_future(egress.prime("t-held", thread))
        await raw.wait_for(lambda: pipeline.full is not None)  # still held: attaching waits
        await js.update_stream(replace(config, max_msgs=-1, discard=DiscardPolicy.OLD))
        async with asyncio.timeout(30):
            await attach
            await pipeline.flush()
    finally:
        await pipeline.stop()

    stored = [
        e["turn"]["id"]
        for e in await raw.stored_events(ore_nats_client, "t-held")
        if e["kind"] == "turn_complete"
    ]
    assert stored == [t.id for t in thread.all_turns() if t.role == Role.ASSISTANT]
    assert (pipeline.fenced, pipeline.lost) == (0, 0)


async def test_an_answer_saved_after_a_batch_without_turns_is_restored_once(
    ore_nats_client: Client,
) -> None:
    """Two crashes in a row on one thread: the first worker stored answer 1 but died
    before its ack, so the next one stored a `done` alone for the redelivered message
    (a batch without turns); that one died between saving answer 2 and storing it.
    The third worker attaches the thread: answer 2 must be stored, once. A batch
    without turns names the last turn stored before it (`Ore-Last-Turn`)."""
    js = ore_nats_client.jetstream()
    await ensure_streams(js, raw.SUBJECTS, BusConfig(partitions=1))
    thread = Thread("t-tail")
    thread.append(Role.USER, Text("hi 1"))
    answer_1 = thread.append(Role.ASSISTANT, Text("answer 1"))
    thread.append(Role.USER, Text("hi 2"))

    async def worker(work: Callable[[Egress], Awaitable[None]]) -> Pipeline:
        pipeline = Pipeline(ore_nats_client)
        await pipeline.start()
        egress = Egress(ore_nats_client, raw.SUBJECTS, pipeline)
        egress.bind(thread.id, "raw")
        try:
            await work(egress)
            await pipeline.flush()
        finally:
            await pipeline.stop()
        return pipeline

    async def first(egress: Egress) -> None:
        await egress.prime(thread.id, thread)
        events = [TurnCompleteEvent(turn=answer_1), LifecycleEvent(phase="done")]
        await egress.emit_batch([(thread.id, event) for event in events])

    async def second(egress: Egress) -> None:  # message 1 again: answered, so `done` alone
        await egress.prime(thread.id, thread)
        await egress.emit_batch([(thread.id, LifecycleEvent(phase="done"))])
        thread.append(Role.ASSISTANT, Text("answer 2"))  # saved; then kill -9

    async def third(egress: Egress) -> None:
        await egress.prime(thread.id, thread)

    for work in (first, second, third):
        pipeline = await worker(work)
        assert (pipeline.fenced, pipeline.lost) == (0, 0)
    await worker(third)  # attached once more: nothing is missing now

    stored = [
        e["turn"]["id"]
        for e in await raw.stored_events(ore_nats_client, thread.id)
        if e["kind"] == "turn_complete" and e["turn"]["role"] == "assistant"
    ]
    assert stored == [t.id for t in thread.all_turns() if t.role == Role.ASSISTANT]


async def test_a_partition_back_from_another_worker_reads_its_threads_again(
    start_core: CoreFactory, store: MemoryStore, ore_nats_client: Client, outbox: Outbox
) -> None:
    """The partition was handed over and came back: the other worker appended to the
    thread meanwhile. Its next answer is fenced from the sequence read again on this
    attach, not the one this worker knew before the handover (which the server would
    refuse: the answer stored late, after a round of refusals)."""
    core = await start_core()
    partition = partition_of("t-back", raw.PARTITIONS)
    await raw.publish(ore_nats_client, "t-back", raw.user_message("hi 1", "m1"))
    await outbox.done("t-back")

    await core.ingress.release(partition)  # handed over: the other worker answers "m2"
    other = Pipeline(ore_nats_client)
    await other.start()
    try:
        egress = Egress(ore_nats_client, raw.SUBJECTS, other)
        egress.bind("t-back", "raw")
        thread = await store.get("t-back")
        await egress.prime("t-back", thread)
        thread.append(Role.USER, Text("hi 2"))
        answer = thread.append(Role.ASSISTANT, Text("hi 2"))
        await store.save(thread)
        events = [TurnCompleteEvent(turn=answer), LifecycleEvent(phase="done")]
        await egress.emit_batch([("t-back", event) for event in events])
        await other.flush()
    finally:
        await other.stop()
    await core.ingress.acquire(partition)  # and back here
    await raw.publish(ore_nats_client, "t-back", raw.user_message("hi 3", "m3"))
    await outbox.done("t-back", 3)

    stored = [
        e["turn"]["id"]
        for e in await raw.stored_events(ore_nats_client, "t-back")
        if e["kind"] == "turn_complete" and e["turn"]["role"] == "assistant"
    ]
    saved = await store.get("t-back")
    assert stored == [t.id for t in saved.all_turns() if t.role == Role.ASSISTANT]
    assert len(stored) == 3
    assert core._pipeline is not None
    assert core._pipeline.fenced == 0  # nothing refused: nothing stored late


async def test_a_batch_without_turns_names_the_last_turn_stored_by_another_worker(
    ore_nats_client: Client,
) -> None:
    """A worker that never attached the thread (a control API call) reads its last
    sequence before appending: it learns the last stored turn from the same read."""
    js = ore_nats_client.jetstream()
    await ensure_streams(js, raw.SUBJECTS, BusConfig(partitions=1))
    thread = Thread("t-named")
    thread.append(Role.USER, Text("hi"))
    answer = None
    for answers in (True, False):
        pipeline = Pipeline(ore_nats_client)
        await pipeline.start()
        egress = Egress(ore_nats_client, raw.SUBJECTS, pipeline)
        egress.bind(thread.id, "raw")
        try:
            if answers:  # the worker that answered
                await egress.prime(thread.id, thread)
                answer = thread.append(Role.ASSISTANT, Text("hello"))
                events = [TurnCompleteEvent(turn=answer), LifecycleEvent(phase="done")]
                await egress.emit_batch([(thread.id, event) for event in events])
            else:  # another one, never attached: a `done` alone
                await egress.emit(thread.id, LifecycleEvent(phase="done"))
            await pipeline.flush()
        finally:
            await pipeline.stop()
        assert (pipeline.fenced, pipeline.lost) == (0, 0)
    last = await js.get_last_msg(raw.SUBJECTS.events_stream, raw.SUBJECTS.events("raw", thread.id))
    assert answer is not None
    assert (last.headers or {}).get("Ore-Last-Turn") == answer.id
    assert [e["kind"] for e in await raw.stored_events(ore_nats_client, thread.id)] == [
        "turn_complete",
        "lifecycle",
        "lifecycle",
    ]


async def test_a_thread_whose_events_cannot_be_read_is_not_primed(ore_nats_url: str) -> None:
    """Attaching reads the thread's last stored event; when NATS does not answer, the
    attach fails (the ingress retries the message later) instead of guessing."""
    nc = await nats.connect(ore_nats_url)
    await ensure_streams(nc.jetstream(), raw.SUBJECTS, BusConfig(partitions=1))
    pipeline = Pipeline(nc)
    await pipeline.start()
    egress = Egress(nc, raw.SUBJECTS, pipeline)
    thread = Thread("t-unread")
    thread.append(Role.USER, Text("hi"))
    thread.append(Role.ASSISTANT, Text("hello"))
    await pipeline.stop()
    await nc.close()
    with pytest.raises(EventsNotRead, match="t-unread"):
        await egress.prime(thread.id, thread)
    assert not egress.primed(thread.id)
