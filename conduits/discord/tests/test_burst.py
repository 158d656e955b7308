"""A burst of 100 messages into one channel under Discord's rate limits.

A user writes 100 messages into one channel at once; the core (the kit's, echo) answers
each in turn and the conduit (in process, on the fake Discord) shows every answer. Five
times during the burst Discord answers a post or an edit with 429 and a `retry_after`.
Counted: every message answered once, in order; the 429s the fake served; the calls of
the channel made while a 429 said to wait (0: the conduit waited what Discord said).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ore_conduit_discord import DiscordConduit
from ore_conduit_discord.testing import FakeDiscord
from ore_core.testing.conduit_conformance import ECHO_PREFIX, StartConduit
from ore_core.testing.long_run import BurstRun, Fault

pytestmark = [pytest.mark.asyncio, pytest.mark.slow]

MESSAGES = 100
RETRY_AFTER = 0.3  # seconds each scripted 429 asks for
LIMITS = {10: "post", 30: "*", 50: "post", 70: "*", 90: "post"}  # after N answers; "*": any call
WITHIN = 60.0


async def test_a_burst_of_100_under_429s_is_answered_once_in_order_waiting_as_told(
    ore_start_conduit: StartConduit, tmp_path: Path
) -> None:
    async with FakeDiscord() as fake:
        run = BurstRun(
            say=fake.user_says,
            shown=fake.bot_texts,
            wait_until=fake.wait_until,
            answer=lambda text: ECHO_PREFIX + text,
            conversations=[fake.add_channel()],
            messages=MESSAGES,
            patience=WITHIN,
        )
        settings = {
            "token": fake.token,
            "api_url": f"{fake.url}/api/v10",
            "state_dir": str(tmp_path / "state"),
            "identify_delay": 0,
        }
        conduit = await ore_start_conduit(DiscordConduit, settings)
        await fake.wait_until(lambda: fake.gateway.readied > 0, WITHIN)

        def limit(route: str) -> Fault:
            async def strike() -> None:
                fake.fail_next(route, 429, retry_after=RETRY_AFTER)

            return strike

        await run.run([(after, limit(route)) for after, route in LIMITS.items()])
        await conduit.stop()
    counts = run.counts()
    print(f"discord burst: {counts}, 429s served {fake.limited}, calls too early {fake.early}")
    assert counts == {
        "sent": MESSAGES,
        "answered": MESSAGES,
        "lost": 0,
        "doubled": 0,
        "out_of_order": 0,
    }
    assert (fake.limited, fake.early) == (len(LIMITS), 0)
