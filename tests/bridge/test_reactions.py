"""Reactions on a real core and nats-server (issue 39): `ConduitClient.react` is one
call; the reaction is kept on the turn, told to every endpoint of a linked thread once,
and never answered."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from nats.aio.client import Client

from ore_core.conduit import ConduitClient, Delivery
from ore_core.events import ErrorEvent, LifecycleEvent, ReactionEvent
from ore_core.session.reactions import reactions_of
from tests.bridge.test_relay_sdk import linked_thread
from tests.bus.conftest import CoreFactory


async def until_done(feed: AsyncIterator[Delivery], count: int = 1) -> list[Delivery]:
    got: list[Delivery] = []
    async for delivery in feed:
        got.append(delivery)
        event = delivery.event
        if isinstance(event, LifecycleEvent) and event.phase == "done":
            count -= 1
            if count == 0:
                return got
    return got


def kinds(deliveries: list[Delivery]) -> list[str]:
    return [d.kind for d in deliveries]


async def test_a_reaction_is_kept_on_the_turn_and_told_to_every_endpoint_once(
    start_core: CoreFactory, ore_nats_client: Client, alpha: ConduitClient, beta: ConduitClient
) -> None:
    await start_core()
    thread = await linked_thread(alpha, beta, ore_nats_client)
    async with alpha.events(thread) as alpha_feed, beta.events(thread) as beta_feed:
        await alpha.send(thread, "hello", id="a-0")
        await until_done(alpha_feed)
        await until_done(beta_feed)
        await beta.react(thread, "a-0", "👍", id="b-r1", user="U7", user_name="Bo")
        await beta.react(thread, "a-0", "👍", id="b-r2", user="U7", user_name="Bo")
        seen = {"alpha": await until_done(alpha_feed, 2), "beta": await until_done(beta_feed, 2)}
    for deliveries in seen.values():
        (reaction,) = [d.event for d in deliveries if isinstance(d.event, ReactionEvent)]
        assert (reaction.emoji, reaction.reactors) == ("👍", ("beta:U7",))
        assert reaction.context.user_name == "Bo"
    question = next(t for t in await alpha.turns(thread) if t.event_id == "a-0")
    assert reactions_of(question) == {"👍": ["beta:U7"]}


async def test_a_reaction_adds_no_turn_and_no_answer(
    start_core: CoreFactory, alpha: ConduitClient
) -> None:
    await start_core()
    thread = await alpha.create_thread("solo-1")
    async with alpha.events(thread) as feed:
        await alpha.send(thread, "hello", id="a-0")
        await until_done(feed)
        before = await alpha.get_thread(thread)
        await alpha.react(thread, "a-0", "👍")
        await alpha.react(thread, "a-0", "👍", remove=True)
        seen = await until_done(feed, 2)
    assert kinds(seen) == ["reaction", "lifecycle", "reaction", "lifecycle"]
    after = await alpha.get_thread(thread)
    assert (after.turns, after.current_tip) == (before.turns, before.current_tip)


async def test_a_reaction_to_an_unknown_turn_is_an_unknown_turn_error(
    start_core: CoreFactory, alpha: ConduitClient
) -> None:
    await start_core()
    thread = await alpha.create_thread("solo-2")
    async with alpha.events(thread) as feed:
        await alpha.send(thread, "hello", id="a-0")
        await until_done(feed)
        await alpha.react(thread, "no-such-message", "👍")
        seen = await until_done(feed)
    (error,) = [d.event for d in seen if isinstance(d.event, ErrorEvent)]
    assert error.code == "unknown_turn"


async def test_a_reaction_to_an_unknown_thread_is_an_unknown_thread_error(
    start_core: CoreFactory, alpha: ConduitClient
) -> None:
    await start_core()
    async with alpha.events("never-made") as feed:
        await alpha.react("never-made", "m1", "👍")
        seen = await until_done(feed)
    (error,) = [d.event for d in seen if isinstance(d.event, ErrorEvent)]
    assert error.code == "unknown_thread"


@pytest.mark.parametrize("emoji", ["", " ", "x" * 65])
async def test_react_refuses_an_empty_or_oversized_emoji_before_sending(
    alpha: ConduitClient, emoji: str
) -> None:
    with pytest.raises(ValueError, match="emoji"):
        await alpha.react("solo-3", "m1", emoji)
