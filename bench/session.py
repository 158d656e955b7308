"""Messages per second through Manager + Stream (echo processor), per store.

Run: `python bench/session.py [--messages N] [--threads N] [--per-thread N] [--idle N]
[--repeat R]`. Prints absolute numbers and, for each persistent store, the ratio
against the in-memory store measured in the same run (absolute times on shared
machines are noise; every figure is the best of R rounds), plus the Python heap each
idle attached stream costs (tracemalloc: SQLite's own page cache is not counted).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from itertools import count
from pathlib import Path

from ore_core import Manager, Store, UserMessageEvent
from ore_core.session.echo import EchoProcessor
from ore_core.session.stores.journal_store import JournalStore
from ore_core.session.stores.memory import MemoryStore
from ore_core.session.stores.sqlite_store import SQLiteStore

TEXT = "the quick brown fox jumps over the lazy dog " * 2

StoreMaker = Callable[[], Store]


def stores(root: Path) -> dict[str, StoreMaker]:
    """A maker of a fresh, empty store per kind (files under `root`)."""
    numbers = count()
    return {
        "memory": MemoryStore,
        "sqlite": lambda: SQLiteStore(root / f"ore-{next(numbers)}.db"),
        "journal": lambda: JournalStore(root / f"journal-{next(numbers)}"),
    }


async def one_thread(make: StoreMaker, messages: int) -> float:
    """Messages per second through one stream, one message at a time."""
    store = make()
    async with Manager(store, EchoProcessor()) as manager:
        stream = await manager.create()
        started = time.perf_counter()
        for index in range(messages):
            await stream.process(UserMessageEvent(id=f"m{index}", content=TEXT))
        elapsed = time.perf_counter() - started
    await store.close()
    return messages / elapsed


async def many_threads(make: StoreMaker, threads: int, per_thread: int) -> float:
    """Messages per second through `threads` streams at once, `per_thread` each."""
    store = make()
    async with Manager(store, EchoProcessor()) as manager:
        streams = [await manager.create() for _ in range(threads)]

        async def drive(index: int) -> None:
            stream = streams[index]
            for n in range(per_thread):
                await stream.process(UserMessageEvent(id=f"t{index}-{n}", content=TEXT))

        started = time.perf_counter()
        await asyncio.gather(*(drive(i) for i in range(threads)))
        elapsed = time.perf_counter() - started
    await store.close()
    return threads * per_thread / elapsed


async def idle_stream_bytes(make: StoreMaker, streams: int) -> float:
    """Python heap per attached stream of a stored, empty thread (nothing in flight)."""
    store = make()
    async with Manager(store, EchoProcessor()) as manager:
        ids = [(await store.create()).id for _ in range(streams)]
        gc.collect()
        tracemalloc.start()
        before = tracemalloc.take_snapshot()
        for thread_id in ids:
            await manager.attach(thread_id)
        gc.collect()
        after = tracemalloc.take_snapshot()
        tracemalloc.stop()
    await store.close()
    grown = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    return grown / streams


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--threads", type=int, default=1000)
    parser.add_argument("--per-thread", type=int, default=10)
    parser.add_argument("--idle", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cpus")
    single: dict[str, float] = {}
    multi: dict[str, float] = {}
    idle: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        makers = stores(Path(tmp))
        for name, make in makers.items():
            runs = range(args.repeat)
            single[name] = max([await one_thread(make, args.messages) for _ in runs])
            multi[name] = max(
                [await many_threads(make, args.threads, args.per_thread) for _ in runs]
            )
            idle[name] = await idle_stream_bytes(make, args.idle)
    many = f"{args.threads}x{args.per_thread} msg/s"
    print(
        f"\n{'store':<8} {'1 thread msg/s':>15} {'ratio':>6} {many:>18} {'ratio':>6}"
        f" {'KiB/idle stream':>16}"
    )
    for name in makers:
        print(
            f"{name:<8} {single[name]:>15,.0f} {single['memory'] / single[name]:>6.2f}"
            f" {multi[name]:>18,.0f} {multi['memory'] / multi[name]:>6.2f}"
            f" {idle[name] / 1024:>16.2f}"
        )
    print(f"(idle: {args.idle:,} streams; ratio = memory msg/s / store msg/s, lower is better)")


if __name__ == "__main__":
    asyncio.run(main())
