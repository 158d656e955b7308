"""A CoreService in a process of its own, for the crash and signal tests.

`python tests/bus/core_runner.py --url URL --db PATH [--hold SECONDS]` serves a
Manager over a SQLite store until SIGTERM/SIGINT (through `ore_core.bus.service.run`).
Its processor prints `TURN <thread> <event id>` on stdout once a turn is running,
then holds the turn for `--hold` seconds (negative: until killed) before answering
with the user's text.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from ore_core import Artifact, Manager, TextDelta, TurnContext
from ore_core.bus.server.streams import BusConfig
from ore_core.bus.service import CoreService, run
from ore_core.session.stores.sqlite_store import SQLiteStore


class AnnouncingProcessor:
    """Starts a turn, announces it on stdout, holds it, then echoes the message."""

    def __init__(self, hold: float) -> None:
        self.hold = hold

    async def __call__(self, ctx: TurnContext) -> None:
        await ctx.step(self._stream(ctx))

    async def _stream(self, ctx: TurnContext) -> AsyncIterator[Artifact]:
        yield TextDelta("…")
        print(f"TURN {ctx.thread_id} {ctx.event.id}", flush=True)
        if self.hold < 0:
            await asyncio.Event().wait()
        await asyncio.sleep(self.hold)
        yield TextDelta(ctx.event.content)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--db", required=True)
    parser.add_argument("--hold", type=float, default=0.0)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--ack-wait", type=float, default=1.0)
    parser.add_argument("--lease-ttl", type=float, default=BusConfig.lease_ttl)
    args = parser.parse_args()

    @asynccontextmanager
    async def app() -> AsyncIterator[CoreService]:
        store = SQLiteStore(args.db)
        try:
            yield CoreService(
                Manager(store, AnnouncingProcessor(args.hold)),
                servers=[args.url],
                config=BusConfig(
                    partitions=args.partitions, ack_wait=args.ack_wait, lease_ttl=args.lease_ttl
                ),
                reconnect_wait=0.05,
            )
        finally:
            await store.close()

    return run(app)


if __name__ == "__main__":
    sys.exit(main())
