"""Several `ore serve` workers on one NATS: one owner per thread through crashes,
joins, graceful stops and pauses. Real processes, a real nats-server, a shared SQLite
store; the audit counts what was stored, per message.
"""

from __future__ import annotations

import asyncio
import functools
import os
import random
import signal
import time
from collections.abc import Callable

import pytest
from nats.aio.client import Client
from nats.errors import Error as NatsError

from ore_core.bus.server.embedded import EmbeddedNatsServer
from ore_core.subjects import partition_of
from tests.scale.conftest import PoolFactory
from tests.scale.harness import Load, Worker, Workers, held_by, leases

PARTITIONS = 32
HANG_GUARD = 30.0  # seconds; bounds a hang, not a performance figure (see bench/workers.py)
ANSWER_TIMEOUT = 90.0
LEASE_GONE = ("partition lease lost", "partition lease lapsed")  # taken, or not renewed here

pytestmark = pytest.mark.slow


@pytest.fixture
def workers(start_workers: PoolFactory) -> Workers:
    return start_workers(PARTITIONS, 0.3)


async def until(check: Callable[[], object], limit: float = HANG_GUARD) -> None:
    """Wait (polling) until the async or plain `check()` is truthy.

    A check that asks NATS may meet a moment the cluster cannot answer (a 503 while a
    stream's leader is elected): that counts as "not yet". Past `limit` the last such
    error is the timeout's cause.
    """
    failure: Exception | None = None
    try:
        async with asyncio.timeout(limit):
            while True:
                try:
                    result = check()
                    if asyncio.iscoroutine(result):
                        result = await result
                except (NatsError, TimeoutError) as exc:
                    failure, result = exc, False
                if result:
                    return
                await asyncio.sleep(0.1)
    except TimeoutError as exc:
        raise TimeoutError(f"not true within {limit} s") from failure or exc


async def shares(nc: Client, *members: Worker) -> list[int]:
    table = await leases(nc)
    return [len(held_by(table, w)) for w in members]


async def balanced(nc: Client, *members: Worker) -> bool:
    """Every member holds a share and together they hold every partition."""
    counts = await shares(nc, *members)
    return sum(counts) == PARTITIONS and min(counts) >= PARTITIONS // len(members) - 1


async def kill_9(nc: Client, load: Load, victim: Worker) -> tuple[float, set[str]]:
    """SIGKILL `victim`; returns the moment and the threads it owned with work pending."""
    owned = set(held_by(await leases(nc), victim))
    pending = {
        t
        for t in load.threads
        if partition_of(t, PARTITIONS) in owned
        and any((t, n) not in load.answer_times for n in range(1, load.sent[t] + 1))
    }
    moment = time.monotonic()
    victim.signal(signal.SIGKILL)
    await victim.wait()
    return moment, pending


def failover(load: Load, moment: float, threads: set[str]) -> float:
    """Seconds from a kill until the last of the victim's busy threads was answered again."""
    first = load.first_answer_after(moment, threads)
    assert set(first) == threads, f"threads never resumed: {sorted(threads - set(first))}"
    return max(first.values(), default=0.0)


async def test_kill_9_of_a_worker_mid_load_twice_loses_nothing(
    workers: Workers, ore_nats_client: Client
) -> None:
    workers.env = {"ORE_NATS__LEASE_TTL": "1.5"}  # a dead worker's share moves after 1.5 s
    a = await workers.start()
    b = await workers.start()
    await until(lambda: balanced(ore_nats_client, a, b))
    load = Load(ore_nats_client, 100)
    await load.listen()

    times = []
    for round_ in range(1, 9):
        await load.send_round()
        if round_ == 2:  # a dies with turns in flight; c replaces it
            times.append(await kill_9(ore_nats_client, load, a))
            c = await workers.start()
        if round_ == 5:  # c has its share by now; b dies too
            await until(functools.partial(balanced, ore_nats_client, b, c))
            times.append(await kill_9(ore_nats_client, load, b))
        await asyncio.sleep(0.4)

    await load.wait_answered(ANSWER_TIMEOUT)
    report = await load.audit(workers.store_path)
    failovers = [failover(load, moment, threads) for moment, threads in times]
    print(f"\nkill -9 x2: {report}\nfailover after kill -9: {[f'{f:.2f}s' for f in failovers]}")
    assert report.sent == 800
    assert report.clean, report.details[:10]
    assert report.answered == report.sent
    assert max(failovers) < HANG_GUARD


async def test_a_joining_worker_takes_a_share_and_sigterm_loses_nothing(
    workers: Workers, ore_nats_client: Client
) -> None:
    a = await workers.start()
    assert await shares(ore_nats_client, a) == [PARTITIONS]
    load = Load(ore_nats_client, 100)
    await load.listen()

    for round_ in range(1, 9):
        await load.send_round()
        if round_ == 2:  # joins mid-load: a hands over a share after draining it
            b = await workers.start()
            await until(functools.partial(balanced, ore_nats_client, a, b))
            assert a.alive  # nobody restarted
            assert b.alive
        if round_ == 5:  # a stops gracefully mid-load: b takes everything
            a.signal(signal.SIGTERM)
        await asyncio.sleep(0.4)

    assert await a.wait() == 0
    await until(lambda: balanced(ore_nats_client, b))
    await load.wait_answered(ANSWER_TIMEOUT)
    report = await load.audit(workers.store_path)
    print(f"\njoin + SIGTERM: {report}")
    assert report.clean, report.details[:10]
    assert report.answered == report.sent == 800
    released = [line for line in a.log() if line.get("event") == "partition leases released"]
    assert released, "a SIGTERMed worker deletes its leases"


async def test_a_paused_worker_that_lost_its_leases_writes_nothing(
    workers: Workers, ore_nats_client: Client
) -> None:
    workers.delay = 1.5  # turns are in flight when the worker is paused
    workers.env = {"ORE_NATS__LEASE_TTL": "1.5"}  # a paused worker's share moves after 1.5 s
    a = await workers.start()
    b = await workers.start()
    await until(functools.partial(balanced, ore_nats_client, a, b))
    load = Load(ore_nats_client, 100)
    await load.listen()
    a_partitions = set(held_by(await leases(ore_nats_client), a))

    await load.send_round()
    mine = {t for t in load.threads if partition_of(t, PARTITIONS) in a_partitions}
    await until(lambda: all((t, 1) in load.recorded for t in mine))  # a's turns are running
    a.signal(signal.SIGSTOP)  # paused mid-turn, past its lease TTL
    try:
        await until(functools.partial(balanced, ore_nats_client, b))  # b took everything over
        await load.wait_answered(ANSWER_TIMEOUT)  # b answered what a had in flight
    finally:
        a.signal(signal.SIGCONT)
    # a wakes up: its turns finish, but its lease is overdue, then lost. Give it time to
    # try to write (its turns end within one delay) and a second round to interfere with.
    await until(lambda: any(line.get("event", "").startswith(LEASE_GONE) for line in a.log()))
    await load.send_round()
    await asyncio.sleep(workers.delay + 1.0)
    await load.wait_answered(ANSWER_TIMEOUT)

    report = await load.audit(workers.store_path)
    print(f"\npaused worker: {report}")
    assert report.clean, report.details[:10]
    assert report.answered == report.sent == 200
    assert any(partition_of(t, PARTITIONS) in a_partitions for t in load.threads)
    lost = {
        line.get("partition") for line in a.log() if line.get("event", "").startswith(LEASE_GONE)
    }
    assert lost == a_partitions  # it noticed, and dropped every partition it had
    assert a.alive  # it keeps serving: it may take a share again later


async def test_workers_paused_at_random_moments_again_and_again_lose_and_double_nothing(
    workers: Workers, ore_nats_client: Client
) -> None:
    """Each worker in turn is frozen (SIGSTOP) at a random moment of a load, past its
    lease, and thawed: wherever the pause caught it (mid-turn, between its lease check
    and an append, with acks pending), the other one takes its threads over and the
    fence refuses what the thawed one still tries to write."""
    workers.env = {"ORE_NATS__LEASE_TTL": "1.5"}  # a pause of 2.5 s outlives a lease
    workers.delay = 0.05
    a = await workers.start()
    b = await workers.start()
    await until(functools.partial(balanced, ore_nats_client, a, b))
    load = Load(ore_nats_client, 60)
    await load.listen()
    rng = random.Random(20261130)

    for round_ in range(8):
        victim = (a, b)[round_ % 2]
        sending = asyncio.ensure_future(load.send_round())
        await asyncio.sleep(rng.uniform(0.0, 0.3))
        victim.signal(signal.SIGSTOP)
        await sending
        await asyncio.sleep(2.5)
        victim.signal(signal.SIGCONT)
        await asyncio.sleep(rng.uniform(0.0, 0.5))

    await load.wait_answered(ANSWER_TIMEOUT)
    report = await load.audit(workers.store_path)
    print(f"\npaused x8 at random moments: {report}")
    assert report.clean, report.details[:10]
    assert report.answered == report.sent == 480
    assert a.alive  # a pause is not a crash: both keep serving
    assert b.alive
    for worker in (a, b):  # each noticed that its pause cost it its leases
        assert any(line.get("event", "").startswith(LEASE_GONE) for line in worker.log())


async def test_a_team_under_mixed_faults_at_random_moments_loses_and_doubles_nothing(
    workers: Workers, ore_nats_client: Client
) -> None:
    """Twelve faults, each at a random moment of a load and on a random member of a team
    of two: a pause shorter than the lease (kept, but overdue for a while), a pause
    longer than it (lost, taken over), kill -9 or SIGTERM (then a new worker joins)."""
    workers.env = {"ORE_NATS__LEASE_TTL": "1.5"}  # valid for 1.1 s after a renewal
    workers.delay = 0.05
    team = [await workers.start(), await workers.start()]
    load = Load(ore_nats_client, 60)
    await load.listen()
    rng = random.Random(4)  # kill, pause, pause, long pause, kill, kill, ... SIGTERM
    faults = []
    for _ in range(12):
        member = rng.randrange(len(team))
        victim = team[member]
        fault = rng.choice(["pause 1.3 s", "pause 2.5 s", "kill -9", "SIGTERM"])
        faults.append(fault)
        sending = asyncio.ensure_future(load.send_round())
        await asyncio.sleep(rng.uniform(0.0, 0.3))
        if fault.startswith("pause"):
            victim.signal(signal.SIGSTOP)
            await sending
            await asyncio.sleep(float(fault.split()[1]))
            victim.signal(signal.SIGCONT)
        else:
            victim.signal(signal.SIGKILL if fault == "kill -9" else signal.SIGTERM)
            await victim.wait()
            await sending
            team[member] = await workers.start()
        await asyncio.sleep(rng.uniform(0.0, 0.5))

    await load.wait_answered(ANSWER_TIMEOUT)
    report = await load.audit(workers.store_path)
    print(f"\nmixed faults {faults}: {report}")
    assert set(faults) == {"pause 1.3 s", "pause 2.5 s", "kill -9", "SIGTERM"}
    assert report.clean, report.details[:10]
    assert report.answered == report.sent == 720


@pytest.mark.parametrize("nats_stop", ["SIGTERM", "kill -9"])
async def test_a_team_through_nats_restarts_pauses_and_kills_loses_and_doubles_nothing(
    nats_stop: str, workers: Workers, ore_nats_client: Client, ore_nats_server: EmbeddedNatsServer
) -> None:
    """Ten faults at random moments of a load: the NATS server stopped (`nats_stop`) and
    started again (six times, four of them within two seconds), a worker paused shorter
    or longer than its lease, or killed and replaced. A partition recycled after a
    reconnect while its lease was overdue (NATS away longer than the lease's validity)
    must be pulled again once the lease is renewed: before, it stayed held and unpulled,
    its messages unanswered."""
    workers.env = {"ORE_NATS__LEASE_TTL": "1.5"}  # valid for 1.1 s after a renewal
    workers.delay = 0.05
    team = [await workers.start(), await workers.start()]
    load = Load(ore_nats_client, 60)
    await load.listen()
    rng = random.Random(1)  # NATS, pause, long pause, NATS, kill, kill, NATS x4
    faults = []
    for _ in range(10):
        member = rng.randrange(len(team))
        victim = team[member]
        fault = rng.choice(["pause 1.3 s", "pause 2.5 s", "kill -9", "NATS", "NATS"])
        faults.append(fault)
        sending = asyncio.ensure_future(load.send_round())
        await asyncio.sleep(rng.uniform(0.0, 0.3))
        if fault.startswith("pause"):
            victim.signal(signal.SIGSTOP)
            await asyncio.sleep(float(fault.split()[1]))
            victim.signal(signal.SIGCONT)
        elif fault == "NATS":
            if nats_stop == "kill -9":  # what it wrote is in the page cache: kept
                os.kill(ore_nats_server.pid, signal.SIGKILL)
                await until(lambda: not ore_nats_server.running)
            await ore_nats_server.arestart()
        else:
            victim.signal(signal.SIGKILL)
            await victim.wait()
            team[member] = await workers.start()
        await sending
        await asyncio.sleep(rng.uniform(0.0, 0.5))

    # Answers stored while the test's own connection was away reach no listener: count
    # them in the stream.
    report = await load.audit(workers.store_path)
    async with asyncio.timeout(ANSWER_TIMEOUT):
        while report.answered < report.sent:
            await asyncio.sleep(0.5)
            report = await load.audit(workers.store_path)
    print(f"\nNATS restarts and worker faults {faults}: {report}")
    assert faults.count("NATS") == 6
    assert report.clean, report.details[:10]
    assert report.answered == report.sent == 600


async def test_500_threads_with_a_2s_turn_each_finish_together_on_one_worker(
    workers: Workers, ore_nats_client: Client
) -> None:
    workers.delay = 2.0
    await workers.start()
    load = Load(ore_nats_client, 500)
    await load.listen()

    started = time.monotonic()
    await load.send_round()
    await load.wait_answered(ANSWER_TIMEOUT)
    elapsed = time.monotonic() - started

    report = await load.audit()
    print(f"\n500 threads x one 2 s turn on one worker: all answered after {elapsed:.2f}s")
    assert report.clean, report.details[:10]
    assert report.answered == report.sent == 500
