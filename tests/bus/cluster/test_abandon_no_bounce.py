"""A message that reaches a worker dropping a lost partition is handed back once, not
bounced until JetStream drops it.

While a worker drops the threads of a partition whose lease it lost (`abandon`), its
pull requests for that partition are still open on the server. A message delivered
meanwhile used to be NAKed at once, and a NAK comes straight back to the same open
request: ten round trips in a few milliseconds and the server gave the message up for
good (`max_deliver`), acknowledged to its sender and never handled, while the thread's
later messages were answered by the next owner. The soak (worker kills) and the fault
run (node kills) found such losses.

Real parts: a nats-server of the kit, the real CoreService, Manager, Egress and
Ownership. The lost lease is the real lease state made stale, as after a pause past its
TTL; the drop is held open by a turn that takes its time to unwind when cancelled.
"""

from __future__ import annotations

import asyncio
import json

from nats.aio.client import Client
from nats.aio.msg import Msg

from ore_core.bus.server.streams import BusConfig
from ore_core.session.echo import EchoProcessor
from ore_core.session.turn_context import TurnContext
from ore_core.subjects import partition_of
from tests.bus import raw
from tests.bus.conftest import CoreFactory, Outbox

HOLD = "hold"


class SlowToUnwind(EchoProcessor):
    """Echo, except that the first `HOLD` turn waits, and when cancelled takes until
    `unwound` to finish (a model call that cleans up after a cancel)."""

    def __init__(self) -> None:
        super().__init__()
        self.running = asyncio.Event()
        self.cancelled = asyncio.Event()
        self.unwound = asyncio.Event()

    async def __call__(self, ctx: TurnContext) -> None:
        if ctx.event.content != HOLD or self.running.is_set():
            await super().__call__(ctx)
            return
        self.running.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled.set()
            await asyncio.shield(self.unwound.wait())
            raise


def same_partition(first: str, count: int) -> str:
    """A thread id of `first`'s partition other than `first`."""
    wanted = partition_of(first, count)
    return next(
        f"t-bounce-{n}" for n in range(1000) if partition_of(f"t-bounce-{n}", count) == wanted
    )


def answers(events: list[dict[str, object]]) -> list[str]:
    return [
        json.dumps(e["turn"])
        for e in events
        if e["kind"] == "turn_complete" and e["turn"].get("role") != "user"  # type: ignore[union-attr]
    ]


async def test_a_message_arriving_while_a_lost_partition_is_dropped_is_handed_back_once(
    start_core: CoreFactory, ore_nats_client: Client, outbox: Outbox
) -> None:
    processor = SlowToUnwind()
    # The partition is claimed again once the lost lease's key expires (1.5 s).
    config = BusConfig(partitions=raw.PARTITIONS, lease_ttl=1.5)
    core = await start_core(processor, config=config)
    gone: list[Msg] = []

    async def given_up(msg: Msg) -> None:
        gone.append(msg)

    await ore_nats_client.subscribe("$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.>", cb=given_up)
    held = "t-bounce-held"
    late = same_partition(held, raw.PARTITIONS)
    await raw.publish(ore_nats_client, held, raw.user_message(HOLD, "m-held"))
    await processor.running.wait()

    lease = core.ownership._leases[partition_of(held, raw.PARTITIONS)]
    lease.renewed -= config.lease_ttl  # a pause past the whole lease: renewal fails
    lease.revision += 1000
    await processor.cancelled.wait()  # the worker is dropping the partition's threads
    await raw.publish(ore_nats_client, late, raw.user_message("arrived late", "m-late"))

    async def settled() -> bool:  # held by the dropping worker, or bounced until given up
        return bool(gone) or any(m.subject.endswith(late) for m in core.ingress._parking.messages())

    await raw.eventually(settled)
    processor.unwound.set()

    async def answered() -> bool:
        return bool(answers(await raw.stored_events(ore_nats_client, late))) or bool(gone)

    await raw.eventually(answered)
    assert [json.loads(m.data)["stream_seq"] for m in gone] == []
    assert len(answers(await raw.stored_events(ore_nats_client, late))) == 1
    await outbox.done(held)
