from __future__ import annotations

from typing import Any

from ore_conduit_discord.testing import GENERAL
from ore_core.conduit import Message


async def test_a_channel_message_arrives_as_a_message(discord: Any) -> None:
    await discord.start()
    sent = await discord.fake.user_says(GENERAL, "hello")
    event = await discord.next_event()
    assert isinstance(event, Message)
    assert (event.platform_id, event.text, event.sender.name) == (sent, "hello", "Alice")
