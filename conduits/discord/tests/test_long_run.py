"""The issue's long run: 200 messages in 40 channels, one answer each, while the conduit
and the core are killed (kill -9) again and again.

`ore serve` (SQLite store, echo after a short delay) and `ore conduit discord` are real
processes; the fake Discord and NATS keep running. Users in 40 channels write 5
messages each, the next once the previous one is answered, all channels at once. After
70 answers shown the conduit is killed by its pid and started again, after 140 the core;
the conduit is killed while Discord holds the answer to a post it
carried out (the conduit never learns the message's id: the restart posts it again with
the same nonce, which Discord answers with the message it made). Counted over all
channels: sent, answered, lost, doubled, out of order; printed (`-s` shows them).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ore_conduit_discord.testing import FakeDiscord
from ore_core.bus.server.embedded import EmbeddedNatsServer
from ore_core.testing.conduit_process import ConduitProcess
from ore_core.testing.long_run import LongRun
from ore_core.testing.serve_process import ServeProcess

pytestmark = [pytest.mark.asyncio, pytest.mark.slow]

CHANNELS = 40
MESSAGES = 5  # per channel
KILL_EVERY = 70  # answers shown between two kills
WITHIN = 60.0  # seconds any one wait may take on a loaded machine


@pytest.mark.timeout(600)
async def test_200_messages_under_kill_9_of_conduit_and_core_are_answered_once_in_order(
    ore_nats_server: EmbeddedNatsServer, tmp_path: Path
) -> None:
    serve = ServeProcess(ore_nats_server.url, tmp_path / "serve")
    async with FakeDiscord() as fake:
        settings = {
            "token": fake.token,
            "api_url": f"{fake.url}/api/v10",
            "state_dir": str(tmp_path / "discord-state"),
            "identify_delay": 0,
        }
        conduit = ConduitProcess.isolated("discord", ore_nats_server.url, tmp_path, settings)

        async def started() -> None:
            readied = fake.gateway.readied
            await conduit.start_ready(lambda: fake.gateway.readied > readied, fake.wait_until)

        async def kill_the_conduit_at_a_post() -> None:
            held = fake.held
            fake.hold_next("post")
            await fake.wait_until(lambda: fake.held > held, WITHIN)
            conduit.kill()
            fake.let_go()
            await started()

        async def kill_the_core() -> None:
            serve.restart()

        run = LongRun(
            say=fake.user_says,
            shown=fake.bot_texts,
            wait_until=fake.wait_until,
            answer=serve.answer,
            conversations=[fake.add_channel() for _ in range(CHANNELS)],
            messages=MESSAGES,
            patience=WITHIN,
        )
        plan = [kill_the_conduit_at_a_post, kill_the_core]
        try:
            serve.start()
            await started()
            counts = await run.run([(KILL_EVERY * (n + 1), f) for n, f in enumerate(plan)])
        finally:
            await conduit.astop()
            await serve.astop()
    print(f"discord, kill -9 of the conduit and of ore serve: {counts}")
    assert (conduit.starts, serve.starts) == (2, 2)
    assert counts == {
        "sent": CHANNELS * MESSAGES,
        "answered": CHANNELS * MESSAGES,
        "lost": 0,
        "doubled": 0,
        "out_of_order": 0,
    }, (run.unanswered, run.differences(), conduit.log.read_text()[-3000:])
