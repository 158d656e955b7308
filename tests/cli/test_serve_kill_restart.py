"""`ore serve` killed with SIGKILL mid-turn and restarted: nothing lost, doubled or reordered.

A real `ore serve` process (SQLite store, echo processor with a delay standing in for a
slow model) holds the first message of ~50 threads in flight when it is killed; the
user keeps typing (a second message per thread), then the core restarts. Every
message must be answered exactly once, and in each thread the in-flight message
before the newer one. The counts are printed (run with -s to see them).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.aio.msg import Msg

from ore_core import Role, Store, Thread
from ore_core.bus.server.embedded import EmbeddedNatsServer
from ore_core.bus.store.jetstream_store import JetStreamStore
from ore_core.session.stores import SQLiteStore
from tests.bus import raw
from tests.ore_process import ORE, kill_all

THREADS = 50
TIMEOUT = 60.0


class _Served:
    """`ore serve` processes on one store; each is killed by its pid at the end."""

    def __init__(self, tmp_path: Path, url: str) -> None:
        self.tmp_path = tmp_path
        self.url = url
        self.store = "sqlite"
        self.delay = "1.5"  # seconds per answer: the echo processor stands in for a model
        self.processes: list[subprocess.Popen[bytes]] = []

    def start(self) -> subprocess.Popen[bytes]:
        env = {
            **os.environ,
            "ORE_LOAD_PLUGINS": "",
            "ORE_STORE__PATH": str(self.tmp_path / "threads.db"),
            "ORE_PROCESSOR__DELAY": self.delay,
            "ORE_LOG__FORMAT": "json",
            # The restarted serve takes the killed one's partitions once their leases
            # expire: after 1.5 s instead of the default 4 s.
            "ORE_NATS__LEASE_TTL": "1.5",
        }
        log = (self.tmp_path / f"serve{len(self.processes)}.log").open("wb")
        process = subprocess.Popen(
            [str(ORE), "serve", "--nats", self.url, "--store", self.store],
            stdout=subprocess.DEVNULL,
            stderr=log,
            env=env,
        )
        log.close()
        self.processes.append(process)
        return process

    def stop_all(self) -> None:
        kill_all(self.processes)


@pytest.fixture
def served(ore_nats_server: EmbeddedNatsServer, tmp_path: Path) -> Iterator[_Served]:
    runner = _Served(tmp_path, ore_nats_server.url)
    yield runner
    runner.stop_all()


class _Outbox:
    """Events of every thread of namespace `raw` from `ore.out.raw.*`, in arrival order."""

    def __init__(self) -> None:
        self.events: dict[str, list[dict[str, Any]]] = {}
        self.changed = asyncio.Event()

    async def receive(self, msg: Msg) -> None:
        message = json.loads(msg.data)  # a batch (protocol.md "Batches") or one event
        events = message["events"] if message["kind"] == "batch" else [message]
        self.events.setdefault(msg.subject.rpartition(".")[2], []).extend(events)
        self.changed.set()

    def turns(self, thread_id: str, role: str) -> list[dict[str, Any]]:
        return [
            e["turn"]
            for e in self.events.get(thread_id, [])
            if e["kind"] == "turn_complete" and e["turn"]["role"] == role
        ]

    async def until(self, condition: Any) -> None:
        async with asyncio.timeout(TIMEOUT):
            while not condition():
                self.changed.clear()
                await self.changed.wait()


def _answer_texts(turns: list[dict[str, Any]]) -> list[str]:
    return [
        "".join(a["data"].get("content", "") for a in turn["artifacts"] if a["kind"] == "text")
        for turn in turns
    ]


@pytest.mark.parametrize("store", ["sqlite", "jetstream"])
async def test_a_killed_and_restarted_serve_answers_in_flight_messages_first(
    served: _Served, ore_nats_server: EmbeddedNatsServer, tmp_path: Path, store: str
) -> None:
    served.store = store
    nc = await nats.connect(ore_nats_server.url)
    try:
        outbox = _Outbox()
        await nc.subscribe("ore.out.raw.*", cb=outbox.receive)
        first = served.start()

        async def send(thread_id: str, text: str) -> None:
            await raw.publish(nc, thread_id, raw.user_message(text, uuid.uuid4().hex))

        threads = [f"kill-{n:02d}" for n in range(THREADS)]
        await raw.until_core_answers(nc, TIMEOUT)
        for thread_id in threads:
            await send(thread_id, f"first {thread_id}")
        # Every first message is recorded and its turn running: kill the core now.
        await outbox.until(lambda: all(outbox.turns(t, "user") for t in threads))
        first.send_signal(signal.SIGKILL)
        first.wait(TIMEOUT)
        answered_before = sum(bool(outbox.turns(t, "assistant")) for t in threads)
        for thread_id in threads:
            await send(thread_id, f"second {thread_id}")
        served.start()
        await outbox.until(lambda: all(len(outbox.turns(t, "assistant")) >= 2 for t in threads))
        await asyncio.sleep(0.5)  # anything doubled would arrive now
        served.stop_all()
        stored = await _stored_threads(store, tmp_path, nc, threads)
    finally:
        await nc.close()

    expected = {t: [f"first {t}", f"second {t}"] for t in threads}
    answers = {t: _answer_texts(outbox.turns(t, "assistant")) for t in threads}
    lost = sum(text not in answers[t] for t in threads for text in expected[t])
    doubled = sum(answers[t].count(text) > 1 for t in threads for text in expected[t])
    out_of_order = sum(answers[t] != expected[t] for t in threads)
    stored_forks = sum(len(t.all_turns()) != len(t.turns()) for t in stored.values())
    stored_wrong = [
        thread_id
        for thread_id, thread in stored.items()
        if [turn.role for turn in thread.turns()] != [Role.USER, Role.ASSISTANT] * 2
    ]
    print(
        f"\nkill -9 + restart ({store}): sent={2 * THREADS} "
        f"answered={sum(map(len, answers.values()))} "
        f"lost={lost} doubled={doubled} out_of_order={out_of_order} "
        f"answered_before_kill={answered_before} stored_forks={stored_forks} "
        f"stored_wrong={len(stored_wrong)}"
    )
    assert (lost, doubled, out_of_order, stored_forks, stored_wrong) == (0, 0, 0, 0, [])


async def _stored_threads(
    name: str, tmp_path: Path, nc: nats.NATS, threads: list[str]
) -> dict[str, Thread]:
    store: Store = SQLiteStore(tmp_path / "threads.db") if name == "sqlite" else JetStreamStore(nc)
    try:
        return {thread_id: await store.get(thread_id) for thread_id in threads}
    finally:
        await store.close()
