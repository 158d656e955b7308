"""The first start's log says what it created, not ten "does not exist" (issue 28, item 13)."""

from __future__ import annotations

from nats.aio.client import Client

from ore_core.bus.server.layout import build_layout
from ore_core.bus.server.streams import BusConfig, ensure_layout, setup_summary
from ore_core.subjects import Subjects


async def test_a_first_start_reports_what_it_created(ore_nats_client: Client) -> None:
    layout = build_layout(Subjects(), BusConfig(partitions=2))
    applied = await ensure_layout(ore_nats_client.jetstream(), layout)
    summary = setup_summary(applied)
    assert list(summary) == ["created"]
    assert "stream ORE_IN" in summary["created"]
    assert "consumer ORE_IN/ore-core-p1" in summary["created"]
    assert not any("does not exist" in entry for entry in summary["created"])


async def test_a_start_on_a_set_up_server_reports_nothing(ore_nats_client: Client) -> None:
    layout = build_layout(Subjects(), BusConfig(partitions=2))
    await ensure_layout(ore_nats_client.jetstream(), layout)
    assert setup_summary(await ensure_layout(ore_nats_client.jetstream(), layout)) == {}
