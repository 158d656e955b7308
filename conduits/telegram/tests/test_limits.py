"""The conduit's limits against the fake Bot API's flood control (a sliding window)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp
import pytest
import pytest_asyncio

from ore_conduit_telegram.api import BotApi, Limits
from ore_conduit_telegram.testing import FakeTelegram

pytestmark = pytest.mark.asyncio

GROUP = -100777
PER_WINDOW = 5
SENDS = 4 * PER_WINDOW + 1  # a burst, then enough to cross several windows


@pytest_asyncio.fixture
async def fake() -> AsyncIterator[FakeTelegram]:
    fake = await FakeTelegram().start()
    try:
        yield fake
    finally:
        await fake.close()


async def test_no_rolling_window_of_a_group_holds_more_sends_than_its_limit(
    fake: FakeTelegram,
) -> None:
    # Telegram's minute scaled to a second on both sides: the fake answers 429 to the
    # first send that would make any second hold more than PER_WINDOW.
    fake.chat(GROUP, "supergroup")
    fake.rate_limit(per_group=(PER_WINDOW, 1.0), retry_after=1)
    limits = Limits(
        chat_per_second=1000, group_per_minute=PER_WINDOW, overall_per_second=1000, minute=1.0
    )
    async with aiohttp.ClientSession() as session:
        api = BotApi(session, fake.api_url, fake.token, limits)
        await asyncio.gather(
            *(api.call("sendMessage", chat_id=GROUP, text=f"m{n}") for n in range(SENDS))
        )
    assert fake.throttled == []
    assert sorted(fake.bot_texts(GROUP)) == sorted(f"m{n}" for n in range(SENDS))


async def test_a_limit_below_one_a_minute_stretches_the_window() -> None:
    limits = Limits(chat_per_second=1, group_per_minute=0.5, overall_per_second=30)
    assert (limits.group_limit, limits.group_window) == (1, 120.0)
