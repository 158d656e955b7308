"""The SDK's side of a linked thread (issue 29): ConduitClients of two namespaces on a
real core and nats-server; what each endpoint's feed classifies, and the delivery map."""

from __future__ import annotations

from collections.abc import AsyncIterator

from nats.aio.client import Client

from ore_core.conduit import ConduitClient, Delivery, SettingsCache, classify
from ore_core.events import LifecycleEvent, TurnCompleteEvent
from tests.bridge.linked import BETA, THREAD, link
from tests.bus.conftest import CoreFactory


async def linked_thread(alpha: ConduitClient, beta: ConduitClient, nc: Client) -> str:
    """THREAD made by alpha, linked inout to beta; beta finds it by its own lookup."""
    await alpha.create_thread(THREAD)
    assert "error" not in await link(nc)
    thread, created = await beta.lookup_or_create(BETA["key"], BETA["value"])
    assert (thread, created) == (THREAD, False)
    return thread


async def user_turns_until_done(feed: AsyncIterator[Delivery]) -> list[Delivery]:
    got: list[Delivery] = []
    async for delivery in feed:
        got.append(delivery)
        event = delivery.event
        if isinstance(event, LifecycleEvent) and event.phase == "done":
            return got
    return got


async def test_a_message_from_one_endpoint_is_labelled_on_the_other_and_not_echoed(
    start_core: CoreFactory, ore_nats_client: Client, alpha: ConduitClient, beta: ConduitClient
) -> None:
    await start_core()
    thread = await linked_thread(alpha, beta, ore_nats_client)
    settings = SettingsCache()
    settings.load(thread, (await alpha.get_thread(thread)).metadata)
    async with alpha.events(thread) as alpha_feed, beta.events(thread) as beta_feed:
        await beta.send(thread, "hi from beta", id="b-1", user="U7", user_name="Bo")
        seen_by_alpha = await user_turns_until_done(alpha_feed)
        seen_by_beta = await user_turns_until_done(beta_feed)
    alpha_actions = [classify(d, "alpha", settings.get(thread)) for d in seen_by_alpha]
    beta_actions = [classify(d, "beta", settings.get(thread)) for d in seen_by_beta]
    assert [r.shown for r in alpha_actions if r.action == "relayed"] == ["Bo (beta): hi from beta"]
    assert [r for r in beta_actions if r.action == "relayed"] == []
    assert sum(r.action == "own" for r in beta_actions) == 1


async def test_a_reported_copy_resolves_both_ways_through_the_client(
    start_core: CoreFactory, ore_nats_client: Client, alpha: ConduitClient, beta: ConduitClient
) -> None:
    await start_core()
    thread = await linked_thread(alpha, beta, ore_nats_client)
    async with alpha.events(thread) as feed:
        await alpha.send(thread, "hello", id="a-1", user_name="Al")
        got = await user_turns_until_done(feed)
    turn = next(d.event.turn.id for d in got if isinstance(d.event, TurnCompleteEvent))
    sequence = next(d.sequence for d in got if d.sequence is not None)
    await beta.report_delivery(
        thread, sequence=sequence, turn=turn, status="delivered", platform_ids=["C-42/1.2"]
    )
    assert await beta.delivery_lookup("C-42/1.2") == (thread, turn)
    assert await beta.delivery_get(thread, turn) == ["C-42/1.2"]


async def test_an_unknown_platform_id_resolves_to_nothing(
    start_core: CoreFactory, ore_nats_client: Client, alpha: ConduitClient, beta: ConduitClient
) -> None:
    await start_core()
    await linked_thread(alpha, beta, ore_nats_client)
    assert await beta.delivery_lookup("never-posted") is None
