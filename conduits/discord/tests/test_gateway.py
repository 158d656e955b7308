"""The gateway session outlives the connection and the process: nothing the core had
not stored is lost, a refusal is one line."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from ore_conduit_discord import MissingToken
from ore_conduit_discord.testing import GENERAL
from ore_core import OreError
from ore_core.conduit import Message


async def texts(discord: Any, count: int, *, ack: bool = True) -> list[str]:
    events = [await discord.next_event() for _ in range(count)]
    if ack:
        for event in events:
            await event.done()
    return [e.text for e in events if isinstance(e, Message)]


async def test_a_restart_resumes_and_gets_what_came_while_it_was_away(discord: Any) -> None:
    await discord.start()
    await discord.fake.user_says(GENERAL, "before")
    assert await texts(discord, 1) == ["before"]
    await discord.stop()
    await discord.fake.user_says(GENERAL, "while away")
    await discord.start()
    assert await texts(discord, 1) == ["while away"]
    assert (discord.fake.gateway.identified, discord.fake.gateway.resumed) == (1, 1)


async def test_events_the_core_did_not_acknowledge_come_again_after_a_restart(discord: Any) -> None:
    await discord.start()
    await discord.fake.user_says(GENERAL, "one")
    await discord.fake.user_says(GENERAL, "two")
    assert await texts(discord, 1) == ["one"]
    assert await texts(discord, 1, ack=False) == ["two"]
    await discord.stop()
    await discord.start()
    await discord.fake.user_says(GENERAL, "three")
    assert await texts(discord, 2) == ["two", "three"]


async def test_a_dropped_connection_resumes_without_losing_an_event(discord: Any) -> None:
    platform = await discord.start()
    await discord.fake.gateway.drop()
    await discord.fake.user_says(GENERAL, "during the drop")
    assert await texts(discord, 1) == ["during the drop"]
    assert discord.fake.gateway.resumed == 1
    assert platform.gateway.connections == 2


async def test_a_reconnect_request_is_resumed(discord: Any) -> None:
    await discord.start()
    await discord.fake.gateway.reconnect()
    await discord.fake.user_says(GENERAL, "after op 7")
    assert await texts(discord, 1) == ["after op 7"]
    assert discord.fake.gateway.resumed == 1


async def test_an_invalid_session_identifies_anew(discord: Any) -> None:
    platform = await discord.start()
    old = platform.session.id
    discord.fake.gateway.session_started.clear()
    await discord.fake.gateway.invalidate()
    await asyncio.wait_for(discord.fake.gateway.session_started.wait(), 10)
    await discord.fake.user_says(GENERAL, "new session")
    assert await texts(discord, 1) == ["new session"]
    assert discord.fake.gateway.identified == 2
    assert platform.session.id != old


async def test_missing_message_content_intent_is_one_line_naming_the_switch(discord: Any) -> None:
    discord.fake.gateway.message_content_allowed = False
    platform = discord.platform_for()
    await platform.connect()
    with pytest.raises(OreError, match="MESSAGE CONTENT INTENT") as refused:
        async for _ in platform.events():
            pass
    await platform.close()
    assert "\n" not in str(refused.value)
    assert discord.fake.gateway.close_codes == [4014]


async def test_a_token_discord_refuses_is_one_line_before_the_gateway(discord: Any) -> None:
    platform = discord.platform_for(
        token="MTEwMDAwMDAwMDAwMDAwMDAwMQ.GfAkE1.a-revoked-token-0123456789abcdef"
    )
    with pytest.raises(MissingToken, match="refused the bot token"):
        await platform.connect()
    await platform.close()
    assert discord.fake.gateway.identified == 0
