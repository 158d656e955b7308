"""Store benchmark: compare-and-set saves and reloads in every built-in store.

Run: `python bench/stores.py [--threads N] [--turns N]`   (not a test)

For each store: N threads, each saving one user and one assistant turn per round
(the save pattern of a handled message: two saves per turn), all threads
concurrently; then every thread reloaded once. The JetStream store runs against an
embedded nats-server (file storage) on this machine. Prints saves/s and loads/s.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

import nats

from ore_core import Role, Store, Text
from ore_core.bus.server.embedded import EmbeddedNatsServer
from ore_core.bus.store.jetstream_store import JetStreamStore
from ore_core.session.stores import JournalStore, JSONStore, MemoryStore, SQLiteStore


async def run(name: str, store: Store, threads: int, turns: int) -> None:
    created = [await store.create() for _ in range(threads)]

    async def converse(index: int) -> None:
        thread = created[index]
        for n in range(turns):
            thread.append(Role.USER, Text(f"message {n} " + "x" * 200))
            await store.save(thread)
            thread.append(Role.ASSISTANT, Text(f"answer {n} " + "y" * 400))
            await store.save(thread)

    start = time.perf_counter()
    await asyncio.gather(*(converse(i) for i in range(threads)))
    saving = time.perf_counter() - start
    start = time.perf_counter()
    await asyncio.gather(*(store.get(thread.id) for thread in created))
    loading = time.perf_counter() - start
    saves = threads * turns * 2
    print(
        f"{name:10} {saves / saving:9.0f} saves/s   {threads / loading:8.0f} loads/s "
        f"({2 * turns} turns each)"
    )


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=50)
    parser.add_argument("--turns", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        stores: list[tuple[str, Store]] = [
            ("memory", MemoryStore()),
            ("sqlite", SQLiteStore(root / "threads.db")),
            ("journal", JournalStore(root / "journal")),
            ("json", JSONStore(root / "json")),
        ]
        for name, store in stores:
            try:
                await run(name, store, args.threads, args.turns)
            finally:
                await store.close()
        with EmbeddedNatsServer(root / "nats") as server:
            nc = await nats.connect(server.url)
            try:
                await run("jetstream", JetStreamStore(nc), args.threads, args.turns)
            finally:
                await nc.close()


if __name__ == "__main__":
    asyncio.run(main())
