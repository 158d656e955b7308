"""Memory per idle thread, before and after idle streams are closed.

Run: `python bench/idle.py [--threads N] [--turns N]`   (not a test)

A Manager over a SQLite store answers `--turns` messages (echo) in each of
`--threads` threads, then sits idle. Python heap (tracemalloc) is measured with
every stream loaded and again after `idle_timeout` closed them; the difference per
thread is what an idle conversation costs a worker that never evicts.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import tempfile
import tracemalloc
from pathlib import Path

from ore_core import EventContext, Manager, UserMessageEvent
from ore_core.session.echo import EchoProcessor
from ore_core.session.stores import SQLiteStore

IDLE = 1.0


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=2000)
    parser.add_argument("--turns", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        store = SQLiteStore(Path(tmp) / "threads.db")
        tracemalloc.start()
        async with Manager(store, EchoProcessor(), idle_timeout=IDLE) as manager:
            gc.collect()
            base = tracemalloc.get_traced_memory()[0]
            streams = [await manager.create() for _ in range(args.threads)]
            for n in range(args.turns):
                await asyncio.gather(
                    *(
                        s.process(
                            UserMessageEvent(
                                content=f"message {n}: " + "lorem ipsum " * 20,
                                context=EventContext(provenance="bench"),
                            )
                        )
                        for s in streams
                    )
                )
            del streams
            gc.collect()
            loaded = tracemalloc.get_traced_memory()[0] - base
            open_before = len(manager.list())
            while manager.list():  # noqa: ASYNC110 - polls the manager, no event to wait on
                await asyncio.sleep(IDLE / 4)
            gc.collect()
            evicted = tracemalloc.get_traced_memory()[0] - base
        await store.close()
    per = args.threads
    print(
        f"{args.threads} threads x {args.turns} turns: {open_before} streams loaded "
        f"{loaded / 1e6:.1f} MB ({loaded / per / 1024:.1f} KiB per thread); after "
        f"eviction 0 streams, {evicted / 1e6:.1f} MB ({evicted / per / 1024:.2f} KiB per thread)"
    )


if __name__ == "__main__":
    asyncio.run(main())
