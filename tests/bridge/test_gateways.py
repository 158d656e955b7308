"""`[[gateway]]` of ore.toml applied by the core at start (issue 29): idempotent, checked."""

from __future__ import annotations

import json
from typing import Any

import pytest
from nats.aio.client import Client

from ore_core.bridge.gateways import GatewayError
from ore_core.config import GatewaySettings
from tests.bus import raw
from tests.bus.conftest import CoreFactory

KEYS = {"slack": "slack.thread", "stdin": "id"}


def team(**extra: Any) -> GatewaySettings:
    return GatewaySettings.model_validate(
        {
            "name": "team",
            "answer": "none",
            "endpoints": [
                {"conduit": "slack", "key": "C1/1712.0001"},
                {"conduit": "stdin", "key": "id=gateway-team", "direction": "in"},
            ],
            **extra,
        }
    )


async def links(nc: Client) -> list[dict[str, Any]]:
    reply = await nc.request("ore.admin.links.list", b"{}", timeout=raw.TIMEOUT)
    found: list[dict[str, Any]] = json.loads(reply.data)["links"]
    return found


async def test_a_gateway_makes_its_thread_and_links_its_endpoints(
    start_core: CoreFactory, ore_nats_client: Client
) -> None:
    await start_core(gateways=[team()], conversation_keys=KEYS.get)
    (found,) = await links(ore_nats_client)
    assert (found["thread"], found["home"], found["gateway"], found["answer"]) == (
        "gateway-team",
        "slack",
        "team",
        "none",
    )
    assert [(e["namespace"], e["key"], e["value"], e["direction"]) for e in found["endpoints"]] == [
        ("slack", "slack.thread", "C1/1712.0001", "inout"),
        ("stdin", "id", "gateway-team", "in"),
    ]
    reply = await ore_nats_client.request(
        "ore.admin.threads.get", b'{"id": "gateway-team"}', timeout=raw.TIMEOUT
    )
    metadata = json.loads(reply.data)["metadata"]
    assert (metadata["ore.gateway"], metadata["ore.gateway.answer"]) == ("team", "none")


async def test_a_gateway_s_home_namespace_is_shown_its_endpoint_key_before_any_message(
    start_core: CoreFactory, ore_nats_client: Client
) -> None:
    await start_core(gateways=[team()], conversation_keys=KEYS.get)
    reply = await ore_nats_client.request(
        "ore.api.slack.threads.get", b'{"id": "gateway-team"}', timeout=raw.TIMEOUT
    )
    assert json.loads(reply.data)["metadata"]["slack.thread"] == "C1/1712.0001"


async def test_applying_a_gateway_again_at_the_next_start_changes_nothing(
    start_core: CoreFactory, ore_nats_client: Client
) -> None:
    first = await start_core(gateways=[team()], conversation_keys=KEYS.get)
    before = await links(ore_nats_client)
    revision = (await (await ore_nats_client.jetstream().key_value("ORE_LINKS")).status()).values
    await first.stop(grace=0)
    await start_core(gateways=[team()], conversation_keys=KEYS.get)
    assert await links(ore_nats_client) == before
    kv = await ore_nats_client.jetstream().key_value("ORE_LINKS")
    assert (await kv.status()).values == revision


async def test_a_changed_answer_policy_is_applied_at_the_next_start(
    start_core: CoreFactory, ore_nats_client: Client
) -> None:
    first = await start_core(gateways=[team()], conversation_keys=KEYS.get)
    await first.stop(grace=0)
    await start_core(gateways=[team(answer="all")], conversation_keys=KEYS.get)
    (found,) = await links(ore_nats_client)
    assert found["answer"] == "all"


async def test_a_gateway_whose_endpoint_another_thread_holds_stops_the_start(
    start_core: CoreFactory, ore_nats_client: Client
) -> None:
    first = await start_core(gateways=[team()], conversation_keys=KEYS.get)
    await first.stop(grace=0)
    other = team(name="other", thread="other-thread")
    with pytest.raises(GatewayError, match=r"gateway 'other'.*by gateway 'team'"):
        await start_core(gateways=[other], conversation_keys=KEYS.get)


async def test_a_gateway_naming_a_conduit_that_is_not_installed_stops_the_start(
    start_core: CoreFactory,
) -> None:
    with pytest.raises(GatewayError, match="no installed conduit named 'slack' declares"):
        await start_core(gateways=[team()], conversation_keys=lambda namespace: None)
