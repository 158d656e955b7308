"""`/metrics` of a real `ore serve`: its counts match what it did (issue 33)."""

from __future__ import annotations

import asyncio
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from ore_core.bus.server.embedded import EmbeddedNatsServer
from tests.cli.test_cli_conduit import Process, raw, start_ore, until_answered
from tests.cli.test_cli_serve import (
    Served,
    client_of,
    converse,
    free_port,
    start_serve,
    wait_until_serving,
)

__all__ = ["client_of", "raw", "start_ore", "start_serve"]  # fixtures, imported for pytest

pytestmark = pytest.mark.slow

TURNS = 5


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of `/metrics`: (name, sorted labels) -> value."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        assert answer.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = answer.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


async def served_with_metrics(
    server: EmbeddedNatsServer, start_serve: Callable[..., Served], client_of: Any
) -> tuple[Any, int]:
    port = free_port()
    served = start_serve("--nats", server.url, "--health-port", str(port))
    nc = await client_of(server.url)
    await wait_until_serving(nc, served)
    return nc, port


async def test_metrics_count_the_turns_served(
    ore_nats_server: EmbeddedNatsServer, start_serve: Callable[..., Served], client_of: Any
) -> None:
    nc, port = await served_with_metrics(ore_nats_server, start_serve, client_of)
    for index in range(TURNS):
        await converse(nc, f"metrics-{index}", f"turn {index}")
    samples = await asyncio.to_thread(scrape, port)
    echo = (("processor", "EchoProcessor"),)
    assert (
        samples[("ore_turns_started_total", echo)],
        samples[("ore_turns_completed_total", echo)],
        samples[("ore_turns_failed_total", echo)],
        samples[("ore_turn_duration_seconds_count", echo)],
        samples[("ore_turn_first_token_seconds_count", echo)],
        samples[("ore_messages_in_flight", ())],
        samples[("ore_store_save_failures_total", ())],
    ) == (TURNS, TURNS, 0, TURNS, TURNS, 0, 0)


async def test_metrics_count_a_dead_lettered_message_by_reason(
    ore_nats_server: EmbeddedNatsServer, start_serve: Callable[..., Served], client_of: Any
) -> None:
    nc, port = await served_with_metrics(ore_nats_server, start_serve, client_of)
    recorded = asyncio.get_running_loop().create_future()

    async def on_record(msg: Any) -> None:
        recorded.set_result(msg)

    await nc.subscribe("ore.dlq.bad_json", cb=on_record)
    await nc.jetstream().publish("ore.in.raw.broken", b"{not json")
    await asyncio.wait_for(recorded, 10)  # counted before it is recorded
    samples = await asyncio.to_thread(scrape, port)
    assert samples[("ore_messages_dead_lettered_total", (("reason", "bad_json"),))] == 1


RECEIVED = "ore_conduit_messages_received_total"


async def test_conduit_metrics_count_the_messages_it_sent_on(
    ore_nats_server: EmbeddedNatsServer, raw: Any, start_ore: Callable[..., Process]
) -> None:
    serve = start_ore("serve", "--nats", ore_nats_server.url)
    await until_answered(raw, "ore.admin.health", serve)
    port = free_port()
    bridge = start_ore("conduit", "nats", "--nats", ore_nats_server.url, "--health-port", str(port))
    await until_answered(raw, "bridge.ready-probe.in", bridge)

    def received() -> float:
        samples = scrape(port)
        return sum(v for (name, _), v in samples.items() if name == RECEIVED)

    # The readiness probe is asked until answered (how many times depends on the
    # machine): the count is read before and after the turns.
    before = await asyncio.to_thread(received)
    for index in range(TURNS):
        await raw.request(f"bridge.c{index}.in", b"hello", timeout=10)
    after = await asyncio.to_thread(received)
    assert after - before == TURNS


async def test_metrics_count_the_saves_and_batches_of_the_turns_served(
    ore_nats_server: EmbeddedNatsServer, start_serve: Callable[..., Served], client_of: Any
) -> None:
    nc, port = await served_with_metrics(ore_nats_server, start_serve, client_of)
    for index in range(TURNS):
        await converse(nc, f"saves-{index}", f"turn {index}")
    samples = await asyncio.to_thread(scrape, port)
    # One save per turn (after the answer) and one stored batch per handled message.
    assert (
        samples[("ore_store_save_duration_seconds_count", ())],
        samples[("ore_egress_batches_total", ())],
        samples[("ore_egress_retries_total", ())],
        samples[("ore_messages_redelivered_total", ())],
    ) == (TURNS, TURNS, 0, 0)
