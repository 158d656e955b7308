"""A lease overdue for a moment loses no answer: every message answered, once, in order.

A worker paused past 3/4 of its lease time (a VM stall, valgrind, a long GC) whose
renewal then succeeds keeps its partitions, but while the lease was overdue its egress
dropped what it had to store. If that moment falls between a turn's save and the
egress run, the answer is saved but not in `P.ev.T`: its message must not be
acknowledged, and the thread's next attach stores the saved answer, as after a kill -9
between the save and the append (a conduit then sees the message's whole batch once, when
the message is handled again).

Real parts: a nats-server of the kit, the real CoreService, Manager, Egress and
Ownership. The blip is the real lease state made overdue right after the inner save of
chosen turns (`LeaseBlip`), and back a moment later, as a renewal after a pause does.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from nats.aio.client import Client
from nats.js.errors import NotFoundError

from ore_core.bus.server.streams import BusConfig
from ore_core.bus.service import CoreService
from ore_core.ledger.thread import Thread
from ore_core.session.protocols import Store
from ore_core.session.stores.memory import MemoryStore
from ore_core.session.stores.wrapper import StoreWrapper
from ore_core.subjects import partition_of
from tests.bus import raw
from tests.bus.conftest import CoreFactory, Outbox

THREADS = 4
MESSAGES = 6  # per thread
BLIPS = 5
BLIP = 0.05  # seconds the lease stays overdue (only bounds the blip; nothing waits on it)


class LeaseBlip(StoreWrapper):
    """`inner`, and after every `every`-th save the worker's lease on the saved thread's
    partition is overdue for a moment (between the save and the egress run), `limit`
    times at most (each blip makes the thread handle its message again, which saves)."""

    def __init__(self, inner: Store, every: int, limit: int, *, lost: bool = False) -> None:
        super().__init__(inner)
        self.every = every
        self.limit = limit
        self.lost = lost
        self.service: CoreService | None = None
        self.saves = 0
        self.blips = 0

    async def save(self, thread: Thread) -> None:
        """Save, then (every `every`-th time) make the lease overdue for `BLIP` seconds."""
        await self.inner.save(thread)
        self.saves += 1
        if self.service is not None and self.saves % self.every == 0 and self.blips < self.limit:
            blip(self.service, thread.id, lost=self.lost)
            self.blips += 1

    async def close(self) -> None:
        """The wrapped store is the test's."""


def blip(service: CoreService, thread_id: str, *, lost: bool = False) -> None:
    """The lease on the thread's partition as after a pause past 3/4 of its TTL, for
    `BLIP` seconds; then as after the renewal that follows the pause (it succeeded).

    `lost`: as after a pause past the whole TTL instead (the key was written meanwhile,
    so the next renewal fails): the worker drops the partition and claims it again
    once the key expired.
    """
    ownership = service.ownership
    lease = ownership._leases.get(partition_of(thread_id, raw.PARTITIONS))
    if lease is None:
        return
    ttl = service.config.lease_ttl
    overdue = lease.renewed - ttl
    lease.renewed = overdue
    if lost:
        lease.revision += 1000  # what the worker holds is not the key's revision any more
        return

    def renewed() -> None:
        if lease.renewed == overdue:  # not renewed meanwhile by the real loop
            lease.renewed = overdue + ttl

    asyncio.get_running_loop().call_later(BLIP, renewed)


def text_of(turn: dict[str, Any]) -> str:
    """The text of a stored turn (its text artifacts joined)."""
    return "".join(
        a["data"].get("content", "") for a in turn.get("artifacts", []) if a["kind"] == "text"
    )


@dataclass
class Tally:
    """Per message: how often it was answered in `P.ev`; per thread: order and dones."""

    sent: int = 0
    answered: int = 0
    lost: list[str] = field(default_factory=list)
    doubled: list[str] = field(default_factory=list)
    out_of_order: list[str] = field(default_factory=list)
    done_seen: int = 0
    extra_done: int = 0


async def send_all(nc: Client) -> list[tuple[str, list[str]]]:
    """`MESSAGES` messages to each of `THREADS` threads; returns each thread's texts."""
    threads = [
        (f"t-blip-{n}", [f"thread {n} message {i}" for i in range(MESSAGES)])
        for n in range(THREADS)
    ]
    for i in range(MESSAGES):
        for thread_id, texts in threads:
            await raw.publish(nc, thread_id, raw.user_message(texts[i], f"{thread_id}-m{i}"))
    return threads


async def tally(nc: Client, outbox: Outbox, threads: list[tuple[str, list[str]]]) -> Tally:
    """Count, from `P.ev` and what a conduit saw on `P.out`, what became of each message."""
    result = Tally()
    for thread_id, texts in threads:
        answers = [
            text_of(e["turn"])
            for e in await raw.stored_events(nc, thread_id)
            if e["kind"] == "turn_complete" and e["turn"].get("role") != "user"
        ]
        order = []
        for text in texts:
            result.sent += 1
            hits = [i for i, answer in enumerate(answers) if text in answer]
            if not hits:
                result.lost.append(text)
                continue
            result.answered += 1
            if len(hits) > 1:
                result.doubled.append(text)
            order.append(hits[0])
        if order != sorted(order):
            result.out_of_order.append(thread_id)
        dones = outbox.count_done(thread_id)
        result.done_seen += min(dones, len(texts))
        result.extra_done += max(0, dones - len(texts))
    return result


async def acknowledged(nc: Client) -> bool:
    """`all_acknowledged`, False while a partition's consumer is being reset (a worker
    that claims a partition again after losing it recreates the consumer)."""
    try:
        return await raw.all_acknowledged(nc)
    except NotFoundError:
        return False


async def dones_or_timeout(outbox: Outbox, threads: list[tuple[str, list[str]]]) -> None:
    """Wait (bounded) for a `done` per message on `P.out`; the tally says what is missing."""
    try:
        await outbox.until(lambda: all(outbox.count_done(t) >= MESSAGES for t, _ in threads))
    except TimeoutError:
        pass


async def run_through(
    blips: LeaseBlip,
    start_core: CoreFactory,
    client: Client,
    outbox: Outbox,
    config: BusConfig | None = None,
) -> tuple[CoreService, Tally]:
    """A core storing through `blips` answers every thread's messages; their counts."""
    core = await start_core(store=blips, config=config)
    blips.service = core
    threads = await send_all(client)
    await raw.eventually(lambda: acknowledged(client))
    await dones_or_timeout(outbox, threads)
    return core, await tally(client, outbox, threads)


async def test_a_lease_blip_between_a_save_and_the_egress_loses_no_answer(
    start_core: CoreFactory, store: MemoryStore, ore_nats_client: Client, outbox: Outbox
) -> None:
    blips = LeaseBlip(store, every=3, limit=BLIPS)
    core, counts = await run_through(blips, start_core, ore_nats_client, outbox)
    print(f"\nblips={blips.blips} refused={core._egress.refused if core._egress else 0} {counts}")
    assert blips.blips == BLIPS  # the window was hit several times
    assert counts.lost == []
    assert counts.doubled == []
    assert counts.out_of_order == []
    assert counts.answered == counts.sent == THREADS * MESSAGES
    assert counts.done_seen == THREADS * MESSAGES


async def test_a_lease_lost_between_a_save_and_the_egress_loses_no_answer(
    start_core: CoreFactory, store: MemoryStore, ore_nats_client: Client, outbox: Outbox
) -> None:
    """A pause past the whole lease: the partition is dropped and claimed again; the
    messages handled but not stored are handed back, not acknowledged."""
    blips = LeaseBlip(store, every=3, limit=1, lost=True)
    # The partition is claimed again once the lost lease's key expires: after 1.5 s
    # instead of the default 4 s.
    config = BusConfig(partitions=raw.PARTITIONS, lease_ttl=1.5)
    _core, counts = await run_through(blips, start_core, ore_nats_client, outbox, config)
    print(f"\nlost leases={blips.blips} {counts}")
    assert blips.blips == 1
    assert counts.lost == counts.doubled == counts.out_of_order == []
    assert counts.answered == counts.done_seen == THREADS * MESSAGES


async def test_a_lease_blip_while_no_turn_runs_loses_nothing(
    core: CoreService, ore_nats_client: Client, outbox: Outbox
) -> None:
    await raw.publish(
        ore_nats_client, "t-blip-idle", raw.user_message("warm up", "t-blip-idle-warm")
    )
    await outbox.done("t-blip-idle")
    refused = core._egress.refused if core._egress else 0
    for partition in list(core.ownership._leases):
        lease = core.ownership._leases[partition]
        lease.renewed -= core.config.lease_ttl
    await asyncio.sleep(BLIP)  # nothing runs meanwhile: no turn, no output
    for partition in list(core.ownership._leases):
        lease = core.ownership._leases[partition]
        lease.renewed += core.config.lease_ttl
    threads = await send_all(ore_nats_client)

    await raw.eventually(lambda: acknowledged(ore_nats_client))
    await dones_or_timeout(outbox, threads)
    counts = await tally(ore_nats_client, outbox, threads)
    assert counts.lost == counts.doubled == counts.out_of_order == []
    assert counts.answered == counts.done_seen == THREADS * MESSAGES
    assert counts.extra_done == 0
    assert (core._egress.refused if core._egress else 0) == refused
