"""A relay across linked namespaces survives `kill -9` of a real `ore serve` (issue 29).

Threads of conduit `alpha` are linked to endpoints of conduit `beta` by an operator
(`P.admin.links.add`). Two raw nats-py clients send messages on both namespaces while
`ore serve` is killed with SIGKILL and restarted. Each endpoint reads `P.out.NS.T` as a
durable feed does: stored batches by `Nats-Sequence`, a sequence it has seen dropped,
a gap (`Nats-Last-Sequence` it has not seen) filled through `P.api.NS.events.read`.
Counted per endpoint: lost, doubled and out of order (all zero); printed with -s.
"""

from __future__ import annotations

import asyncio
import json
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.aio.msg import Msg

from ore_core.bus.server.embedded import EmbeddedNatsServer
from tests.bus import raw
from tests.cli.test_serve_kill_restart import TIMEOUT, _Served

THREADS = 6
PER_ENDPOINT = 12  # messages each namespace sends to each thread
NAMESPACES = ("alpha", "beta")


@pytest.fixture
def served(ore_nats_server: EmbeddedNatsServer, tmp_path: Path) -> Iterator[_Served]:
    runner = _Served(tmp_path, ore_nats_server.url)
    runner.delay = "0.05"  # answers quick enough that the kill lands mid-relay
    yield runner
    runner.stop_all()


class _Feed:
    """One endpoint's view: stored batches per thread, by sequence, as a feed keeps them."""

    def __init__(self, nc: nats.NATS, namespace: str) -> None:
        self.nc = nc
        self.namespace = namespace
        self.batches: dict[str, dict[int, list[dict[str, Any]]]] = {}
        self.gaps: dict[str, set[int]] = {}  # previous sequences announced but not seen
        self.redundant = 0  # copies of a sequence already held (dropped, as a feed does)
        self.changed = asyncio.Event()

    async def receive(self, msg: Msg) -> None:
        headers = msg.headers or {}
        if "Nats-Sequence" not in headers:
            return  # live-only events: never stored
        thread = msg.subject.rpartition(".")[2]
        held = self.batches.setdefault(thread, {})
        sequence = int(headers["Nats-Sequence"])
        if sequence in held:
            self.redundant += 1
            return
        held[sequence] = json.loads(msg.data)["events"]
        self.gaps.setdefault(thread, set()).add(int(headers.get("Nats-Last-Sequence", "0")))
        self.changed.set()

    async def catch_up(self, thread: str) -> int:
        """Read the thread's stored events through the core (the feed's gap path)."""
        held = self.batches.setdefault(thread, {})
        fetched = 0
        after = 0
        while True:
            body = {"thread": thread, "after": after, "limit": 100}
            reply = await self.nc.request(
                f"ore.api.{self.namespace}.events.read", json.dumps(body).encode(), timeout=10
            )
            page = json.loads(reply.data)
            for entry in page["events"]:
                if entry["sequence"] not in held:
                    held[entry["sequence"]] = entry["event"]["events"]
                    fetched += 1
            if page["next"] is None:
                return fetched
            after = page["next"]

    def user_texts(self, thread: str) -> list[str]:
        """The user messages of the thread, in sequence (ledger) order."""
        return [
            event["turn"]["artifacts"][0]["data"]["content"]
            for _, events in sorted(self.batches.get(thread, {}).items())
            for event in events
            if event["kind"] == "turn_complete" and event["turn"]["role"] == "user"
        ]

    def answered(self, thread: str) -> int:
        return sum(
            1
            for events in self.batches.get(thread, {}).values()
            for event in events
            if event["kind"] == "turn_complete" and event["turn"]["role"] == "assistant"
        )


async def test_a_relay_killed_mid_way_loses_doubles_and_reorders_nothing_on_any_endpoint(
    served: _Served, ore_nats_server: EmbeddedNatsServer
) -> None:
    nc = await nats.connect(ore_nats_server.url)
    try:
        feeds = {ns: _Feed(nc, ns) for ns in NAMESPACES}
        for ns, feed in feeds.items():
            await nc.subscribe(f"ore.out.{ns}.*", cb=feed.receive)
        core = served.start()
        await raw.until_core_answers(nc, TIMEOUT)
        threads = [f"relay-{n}" for n in range(THREADS)]
        sent: dict[str, list[str]] = {t: [] for t in threads}

        async def send(ns: str, thread: str, text: str) -> None:
            message = raw.user_message(text, uuid.uuid4().hex, ns)
            await raw.publish(nc, thread, message, namespace=ns)
            sent[thread].append(text)

        for thread in threads:
            made = {"id": thread, "namespace": "alpha"}
            await nc.request("ore.admin.threads.create", json.dumps(made).encode(), timeout=10)
            await send("alpha", thread, f"{thread} hello")
            body = {
                "thread": thread,
                "endpoint": {"namespace": "beta", "key": "beta.room", "value": thread},
            }
            reply = await nc.request("ore.admin.links.add", json.dumps(body).encode(), timeout=10)
            assert "error" not in json.loads(reply.data), reply.data

        async def relay(start: int, stop: int) -> None:
            for n in range(start, stop):
                for thread in threads:
                    for ns in NAMESPACES:
                        await send(ns, thread, f"{thread} {ns} {n}")

        half = PER_ENDPOINT // 2
        await relay(0, half)
        # Kill while the relay is under way: some of it answered, some not yet.
        await feeds["beta"].changed.wait()
        core.send_signal(signal.SIGKILL)
        core.wait(TIMEOUT)
        await relay(half, PER_ENDPOINT)
        served.start()
        total = 1 + len(NAMESPACES) * PER_ENDPOINT

        async def answered() -> None:
            async with asyncio.timeout(TIMEOUT):
                while not all(feeds["alpha"].answered(t) >= total for t in threads):
                    feeds["alpha"].changed.clear()
                    await feeds["alpha"].changed.wait()

        await answered()
        await raw.until_core_answers(nc, TIMEOUT)
        caught_up = {ns: 0 for ns in NAMESPACES}
        for ns, feed in feeds.items():
            for thread in threads:
                announced = feed.gaps.get(thread, set()) - {0}
                if announced - set(feed.batches.get(thread, {})) or ns == "beta":
                    caught_up[ns] += await feed.catch_up(thread)
        ledger = {}
        for thread in threads:
            reply = await nc.request(
                "ore.admin.threads.turns", json.dumps({"id": thread}).encode(), timeout=10
            )
            ledger[thread] = [
                t["artifacts"][0]["data"]["content"]
                for t in json.loads(reply.data)["turns"]
                if t["role"] == "user"
            ]
        served.stop_all()
    finally:
        await nc.close()

    counts = {}
    for ns, feed in feeds.items():
        lost = doubled = out_of_order = 0
        for thread in threads:
            shown = feed.user_texts(thread)
            expected = sent[thread] if ns == "alpha" else sent[thread][1:]
            lost += sum(text not in shown for text in expected)
            doubled += sum(shown.count(text) - 1 for text in set(shown))
            ledger_order = [text for text in ledger[thread] if text in shown]
            out_of_order += shown != ledger_order
        counts[ns] = {"lost": lost, "doubled": doubled, "out_of_order": out_of_order}
        print(
            f"\nrelay kill -9 ({ns}): sent={THREADS * len(NAMESPACES) * PER_ENDPOINT} "
            f"lost={lost} doubled={doubled} out_of_order={out_of_order} "
            f"caught_up={caught_up[ns]} redundant_copies={feed.redundant}"
        )
    ledger_doubled = sum(len(texts) - len(set(texts)) for texts in ledger.values())
    assert ledger_doubled == 0
    assert counts == {ns: {"lost": 0, "doubled": 0, "out_of_order": 0} for ns in NAMESPACES}
