"""The control API with two `ore serve` workers: every worker answers alike.

Threads are made by `threads.lookup`, which a worker that does not own the thread's
partition may answer; later requests about the thread reach either worker (micro's
queue group picks one at random). Every answer is compared with the stored thread:
what a worker that does not own a thread says about it must be what its owner says.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from nats.aio.client import Client

from ore_core.session.stores import SQLiteStore
from tests.scale.conftest import PoolFactory
from tests.scale.harness import Load, Worker, Workers, held_by, leases
from tests.scale.test_workers import until

PARTITIONS = 8
THREADS = 20
ASKED = 8  # requests per thread and method: each worker answers some of them
ANSWER_TIMEOUT = 60.0

pytestmark = pytest.mark.slow


@pytest.fixture
def workers(start_workers: PoolFactory) -> Workers:
    return start_workers(PARTITIONS, 0.05)


async def balanced(nc: Client, *members: Worker) -> bool:
    """Both workers hold a share and together they hold every partition."""
    table = await leases(nc)
    counts = [len(held_by(table, w)) for w in members]
    return sum(counts) == PARTITIONS and min(counts) > 0


async def call(nc: Client, method: str, body: dict[str, Any]) -> dict[str, Any]:
    """One control API request of namespace `load`; its JSON reply (errors included)."""
    reply = await nc.request(f"ore.api.load.{method}", json.dumps(body).encode(), timeout=10)
    answer: dict[str, Any] = json.loads(reply.data)
    return answer


async def requests_per_worker(nc: Client, endpoint: str) -> list[int]:
    """How many requests of `endpoint` each worker's micro service handled."""
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    await nc.publish("$SRV.STATS.ore", b"", reply=inbox)
    counts = []
    try:
        for _ in range(2):
            stats = json.loads((await sub.next_msg(timeout=5)).data)
            counts += [e["num_requests"] for e in stats["endpoints"] if e["name"] == endpoint]
    finally:
        await sub.unsubscribe()
    return counts


async def test_every_worker_answers_about_every_thread_as_its_owner_does(
    workers: Workers, ore_nats_client: Client
) -> None:
    a = await workers.start()
    b = await workers.start()
    await until(lambda: balanced(ore_nats_client, a, b))
    nc = ore_nats_client
    threads = [
        (await call(nc, "threads.lookup", {"key": "load.channel", "value": f"c{i}"}))["id"]
        for i in range(THREADS)
    ]
    load = Load(nc, 0)
    load.threads = threads
    await load.listen()
    for _ in range(3):
        await load.send_round()
        await load.wait_answered(ANSWER_TIMEOUT)
    assert load.answered() == 3 * THREADS

    store = SQLiteStore(workers.store_path)
    try:
        stored = {t: await store.get(t) for t in threads}
    finally:
        await store.close()
    mismatches = []
    for thread_id, thread in stored.items():
        expected_turns = [turn.id for turn in thread.turns()]
        for _ in range(ASKED):
            got = await call(nc, "threads.get", {"id": thread_id})
            if (got.get("turns"), got.get("current_tip")) != (6, thread.current_tip):
                mismatches.append(f"get {thread_id}: {got}")
            turns = await call(nc, "threads.turns", {"id": thread_id})
            if [turn["id"] for turn in turns.get("turns", [])] != expected_turns:
                mismatches.append(f"turns {thread_id}: {turns}")
    print(f"\n{THREADS} threads x {ASKED} requests of get and turns: {len(mismatches)} differ")
    assert mismatches == []
    assert min(await requests_per_worker(nc, "threads_get")) > 0  # both workers answered


async def test_writes_succeed_whichever_worker_receives_them_and_reach_the_owner(
    workers: Workers, ore_nats_client: Client
) -> None:
    a = await workers.start()
    b = await workers.start()
    await until(lambda: balanced(ore_nats_client, a, b))
    nc = ore_nats_client
    threads = [
        (await call(nc, "threads.lookup", {"key": "load.channel", "value": f"c{i}"}))["id"]
        for i in range(THREADS)
    ]
    load = Load(nc, 0)
    load.threads = threads
    await load.listen()
    for _ in range(2):
        await load.send_round()
        await load.wait_answered(ANSWER_TIMEOUT)

    failures = []
    forks: dict[str, str] = {}
    for thread_id in threads:
        turns = (await call(nc, "threads.turns", {"id": thread_id}))["turns"]
        forks[thread_id] = turns[1]["id"]  # the first answer: the next message branches there
        for n in range(ASKED):
            meta = await call(
                nc, "threads.meta.set", {"id": thread_id, "key": "title", "value": f"v{n}"}
            )
            if "error" in meta or meta["metadata"].get("title") != f"v{n}":
                failures.append(f"meta.set {thread_id}: {meta}")
            fork = await call(nc, "threads.fork", {"id": thread_id, "turn_id": forks[thread_id]})
            if fork != {"id": thread_id, "current_tip": forks[thread_id]}:
                failures.append(f"fork {thread_id}: {fork}")
    assert failures == []
    assert min(await requests_per_worker(nc, "threads_fork")) > 0  # both workers answered

    await load.send_round()  # message 3 of each thread branches from the first answer
    await load.wait_answered(ANSWER_TIMEOUT)
    store = SQLiteStore(workers.store_path)
    try:
        for thread_id in threads:
            thread = await store.get(thread_id)
            path = thread.turns()
            assert [turn.role for turn in path] == ["user", "assistant"] * 2
            assert path[1].id == forks[thread_id]  # the owner's stream saw the fork
            assert thread.meta().get("title") == f"v{ASKED - 1}"
    finally:
        await store.close()
