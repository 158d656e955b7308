"""Reactions through the platform engine (issue 39): a scripted platform without reactions
run as a conduit against a real core on a real nats-server. A reaction made on the
platform reaches the core's turn; one made elsewhere is a short line only where the
gateway asks for it. A reaction on the bot's own answer lands on the answer's turn."""

from __future__ import annotations

import asyncio

from ore_core.conduit import Message, Reaction, Sender
from ore_core.events import ReactionEvent
from ore_core.session.reactions import reactions_of
from ore_core.testing.conduit_conformance import ConduitCore, StartConduit
from ore_core.testing.scripted_platform import ScriptedPlatform
from ore_core.turn import Role
from tests.bus.raw import eventually
from tests.conduit.test_engine import (
    ROOM,
    THREAD,
    TIMEOUT,
    answered_hi,
    copied,
    relaying,
    start,
)


async def shown_after(platform: ScriptedPlatform, count: int) -> list[str]:
    return await asyncio.wait_for(platform.wait_for(ROOM, count), TIMEOUT)


async def reported(core: ConduitCore, copy: str) -> None:
    """Until the scripted conduit has reported `copy` (it reports after posting)."""
    memo = core.client_for("memo")

    async def found() -> bool:
        return await memo.delivery_lookup(copy) is not None

    await eventually(found)


async def test_a_reaction_elsewhere_is_a_short_line_where_the_gateway_asks_for_it(
    ore_conduit_core: ConduitCore, ore_start_conduit: StartConduit
) -> None:
    web, platform = await relaying(ore_conduit_core, ore_start_conduit, reaction_lines=True)
    await copied(web, platform, "hello")
    await web.react(THREAD, "w-1", "👍", user="ana", user_name="Ana")
    assert await shown_after(platform, 2) == ["Ana (web): hello", 'Ana reacted 👍 to "hello"']


async def test_a_reaction_elsewhere_shows_nothing_where_the_gateway_does_not_ask(
    ore_conduit_core: ConduitCore, ore_start_conduit: StartConduit
) -> None:
    web, platform = await relaying(ore_conduit_core, ore_start_conduit)
    await copied(web, platform, "hello")
    await web.react(THREAD, "w-1", "👍", user="ana", user_name="Ana")
    await web.send(THREAD, "after the reaction", id="w-2", user_name="Ana")
    shown = await shown_after(platform, 2)  # the lane shows a thread's events in order
    assert shown == ["Ana (web): hello", "Ana (web): after the reaction"]


async def test_a_reaction_on_a_copy_here_is_recorded_on_the_copied_turn(
    ore_conduit_core: ConduitCore, ore_start_conduit: StartConduit
) -> None:
    web, platform = await relaying(ore_conduit_core, ore_start_conduit)
    async with web.events(THREAD, kinds={"reaction"}) as feed:
        await copied(web, platform, "hello")
        (copy,) = platform.shown[ROOM]
        await reported(ore_conduit_core, copy)
        platform.receive(
            Reaction(
                conversation=ROOM,
                platform_id="r-1",
                sender=Sender("Bo", id="bo"),
                target=copy,
                emoji="🎉",
            )
        )
        reaction = (await asyncio.wait_for(anext(aiter(feed)), TIMEOUT)).event
    turns = await web.turns(THREAD)
    question = next(t for t in turns if t.event_id == "w-1")
    assert reactions_of(question) == {"🎉": ["memo:bo"]}
    assert getattr(reaction, "turn", "") == question.id


async def test_a_reaction_on_the_platform_never_starts_a_model_turn(
    ore_conduit_core: ConduitCore, ore_start_conduit: StartConduit
) -> None:
    platform = await answered_hi(ore_start_conduit)
    platform.receive(
        Reaction(
            conversation=ROOM, platform_id="r-1", sender=Sender("Ana"), target="p-1", emoji="👍"
        )
    )
    platform.receive(Message(conversation=ROOM, platform_id="p-2", sender=Sender("Ana"), text="x"))
    assert await shown_after(platform, 2) == ["echo: hi", "echo: x"]  # no answer between


async def test_a_reaction_on_the_bots_answer_here_is_recorded_on_the_answer_turn(
    ore_conduit_core: ConduitCore, ore_start_conduit: StartConduit
) -> None:
    platform = ScriptedPlatform()
    await start(ore_start_conduit, platform)
    memo = ore_conduit_core.client_for("memo")
    thread_id, _ = await memo.lookup_or_create("memo.room", ROOM)
    async with memo.events(thread_id, kinds={"reaction", "error"}) as feed:
        platform.receive(
            Message(conversation=ROOM, platform_id="p-1", sender=Sender("Ana"), text="hi")
        )
        assert await shown_after(platform, 1) == ["echo: hi"]
        (answer,) = platform.shown[ROOM]
        platform.receive(
            Reaction(
                conversation=ROOM,
                platform_id="r-1",
                sender=Sender("Ana", id="ana"),
                target=answer,
                emoji="👍",
            )
        )
        reaction = (await asyncio.wait_for(anext(aiter(feed)), TIMEOUT)).event
    assert isinstance(reaction, ReactionEvent)  # not an `unknown_turn` error
    (answered,) = [t for t in await memo.turns(thread_id) if t.role == Role.ASSISTANT]
    assert reaction.turn == answered.id
    assert reactions_of(answered) == {"👍": ["memo:ana"]}
