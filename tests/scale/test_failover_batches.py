"""kill -9 of a worker between saving an answer and storing its batch, and of one of
two workers under load: every stored answer is in a whole batch.

One test catches the moment for sure: the worker talks to NATS through a proxy
that the test freezes once the worker has the message, so its answer is saved (the
SQLite file shows it) but its batch never leaves; then it is killed.

Whatever moment the kill catches (mid-turn, between a save and its batch), every
message's stored batch must hold what a normal turn stores: the user's `turn_complete`,
the `text`, the assistant's `turn_complete` and `done`, each with the message's context
(a conduit that filters by its provenance shows nothing else). Counted over every
stored batch, with the harness's audit of lost, doubled and reordered answers.
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
from typing import Any

import pytest
from nats.aio.client import Client
from nats.js.api import DeliverPolicy

from ore_core.bus.server.embedded import EmbeddedNatsServer
from ore_core.bus.server.streams import consumer_name
from ore_core.session.stores import SQLiteStore
from ore_core.subjects import partition_of
from tests.scale.conftest import PoolFactory
from tests.scale.harness import Load, Workers, held_by, leases
from tests.scale.test_control_api_workers import PARTITIONS, balanced
from tests.scale.test_workers import until

ANSWER_TIMEOUT = 90.0

pytestmark = pytest.mark.slow


@pytest.fixture
def workers(start_workers: PoolFactory) -> Workers:
    return start_workers(PARTITIONS, 0.05, env={"ORE_NATS__LEASE_TTL": "1.5"})


def incomplete(batch: list[dict[str, Any]]) -> bool:
    """A batch with an answer that is not a whole normal turn with its context."""
    kinds = [e.get("kind") for e in batch]
    roles = [e["turn"]["role"] for e in batch if e.get("kind") == "turn_complete"]
    contexts = {json.dumps(e.get("context"), sort_keys=True) for e in batch}
    if "assistant" not in roles:
        return False  # a `done` alone, for a message answered before
    return (
        kinds != ["turn_complete", "text", "turn_complete", "lifecycle"]
        or roles != ["user", "assistant"]
        or contexts != {json.dumps({"provenance": "load"})}
    )


async def stored_batches(nc: Client, subject: str = "ore.ev.>") -> list[list[dict[str, Any]]]:
    js = nc.jetstream()
    total = (await js.stream_info("ORE_EVENTS", subjects_filter=subject)).state.messages
    sub = await js.subscribe(subject, ordered_consumer=True, deliver_policy=DeliverPolicy.ALL)
    batches = []
    try:
        for _ in range(total):
            msg = await sub.next_msg(timeout=10)
            batches.append(json.loads(msg.data)["events"])
    finally:
        await sub.unsubscribe()
    return batches


async def test_a_kill_9_mid_load_leaves_every_answer_in_a_whole_batch_with_its_context(
    workers: Workers, ore_nats_client: Client
) -> None:
    a = await workers.start()
    b = await workers.start()
    await until(lambda: balanced(ore_nats_client, a, b))
    load = Load(ore_nats_client, 40)
    await load.listen()
    for round_ in range(1, 7):
        await load.send_round()
        if round_ == 2:  # turns in flight on both workers
            a.signal(signal.SIGKILL)
            await a.wait()
            await workers.start()
        await asyncio.sleep(0.2)
    await load.wait_answered(ANSWER_TIMEOUT)

    report = await load.audit(workers.store_path)
    batches = await stored_batches(ore_nats_client)
    broken = [batch for batch in batches if incomplete(batch)]
    print(f"\nkill -9 of 1 of 2: {report}; {len(batches)} batches, {len(broken)} incomplete")
    assert report.clean, report.details[:10]
    assert report.answered == report.sent == 240
    assert broken == []


class FreezingProxy:
    """A TCP proxy to NATS for one worker: `freeze()` stops every byte both ways, as if
    the worker had been cut off at that instant (what it sends is never delivered)."""

    def __init__(self, upstream: str) -> None:
        host, _, port = upstream.removeprefix("nats://").rpartition(":")
        self.upstream = (host, int(port))
        self.flowing = asyncio.Event()
        self.flowing.set()
        self.server: asyncio.Server | None = None
        self.tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._connected, "127.0.0.1", 0)
        return f"nats://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    def freeze(self) -> None:
        self.flowing.clear()

    async def _connected(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        for source, sink in ((reader, up_writer), (up_reader, writer)):
            task = asyncio.ensure_future(self._pump(source, sink))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    async def _pump(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        try:
            while data := await source.read(65536):
                await self.flowing.wait()
                sink.write(data)
                await sink.drain()
        except OSError:
            pass
        finally:
            sink.close()

    async def stop(self) -> None:
        for task in list(self.tasks):
            task.cancel()
        if self.server is not None:
            self.server.close()


def shape(batch: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A batch without what differs between two messages of a thread: turn ids, parents,
    timestamps, event ids and the message number in the text ("<thread>:<n>")."""
    shaped: list[dict[str, Any]] = json.loads(re.sub(r'"(t\d+):\d+"', r'"\1:n"', json.dumps(batch)))
    return _without_ids(shaped)


def _without_ids(batch: list[dict[str, Any]]) -> list[dict[str, Any]]:
    shaped = []
    for event in batch:
        event = dict(event)
        if "turn" in event:
            turn = {k: v for k, v in event["turn"].items() if k not in ("id", "parent_id")}
            turn.pop("timestamp", None)
            metadata = turn.get("metadata", {})
            turn["metadata"] = {k: v for k, v in metadata.items() if k != "event_id"}
            event["turn"] = turn
        shaped.append(event)
    return shaped


async def test_a_worker_killed_between_saving_an_answer_and_storing_it_is_replaced_exactly(
    workers: Workers, ore_nats_client: Client, ore_nats_server: EmbeddedNatsServer
) -> None:
    """The worker is cut off from NATS right after it took the message and killed -9 once
    its answer is in the store: its batch never left. The next owner's batch for that
    message is the one a normal turn stores (compared with the first message's)."""
    proxy = FreezingProxy(ore_nats_server.url)
    workers.delay = 1.0  # the moment to cut it off comes before the save...
    workers.env = {}  # ...which comes before its lease (4 s) is overdue: the save is allowed
    workers.servers = [await proxy.start()]
    a = await workers.start()
    workers.servers = [ore_nats_server.url]
    b = await workers.start()
    await until(lambda: balanced(ore_nats_client, a, b))
    held = set(held_by(await leases(ore_nats_client), a))
    thread_id = next(f"t{n}" for n in range(1000) if partition_of(f"t{n}", PARTITIONS) in held)
    load = Load(ore_nats_client, 0)
    load.threads = [thread_id]
    await load.listen()
    js = ore_nats_client.jetstream()
    consumer = consumer_name(partition_of(thread_id, PARTITIONS))
    try:
        await load.send(thread_id)
        await load.wait_answered(ANSWER_TIMEOUT)
        await load.send(thread_id)
        async with asyncio.timeout(ANSWER_TIMEOUT):  # a has it (and answers in 1 s)
            while not (await js.consumer_info("ORE_IN", consumer)).num_ack_pending:  # noqa: ASYNC110
                await asyncio.sleep(0.01)
        proxy.freeze()
        store = SQLiteStore(workers.store_path)
        try:
            async with asyncio.timeout(ANSWER_TIMEOUT):
                while len((await store.get(thread_id)).all_turns()) < 4:  # noqa: ASYNC110
                    await asyncio.sleep(0.05)  # another process saves it: nothing to await
            saved = await store.get(thread_id)
        finally:
            await store.close()
        a.signal(signal.SIGKILL)
        await a.wait()
        await load.wait_answered(ANSWER_TIMEOUT)  # b stored it
    finally:
        await proxy.stop()

    normal, recovered = await batches_of(ore_nats_client, thread_id)
    assert shape(recovered) == shape(normal)
    assert [e["turn"]["id"] for e in recovered if e["kind"] == "turn_complete"] == [
        t.id for t in saved.turns()[2:]
    ]
    assert {json.dumps(e["context"]) for e in recovered} == {json.dumps({"provenance": "load"})}


async def batches_of(nc: Client, thread_id: str) -> list[list[dict[str, Any]]]:
    """The stored batches of one thread of namespace `load`, in order."""
    return [
        batch
        for batch in await stored_batches(nc, f"ore.ev.load.{thread_id}")
        if any(e.get("kind") == "turn_complete" for e in batch)
    ]
