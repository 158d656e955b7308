"""A gateway Discord <-> Matrix <-> Slack: each endpoint shows the others' messages once,
in order, labelled, and never its own (issue 38).

The three conduits run on the engine in this process, each on its platform's fake, with
the kit's core on a real nats-server. A Slack thread gets its ore thread the usual way
(a user writes to the bot); a Discord channel (no webhook: the bot posts copies with the
label in bold) and a Matrix room are linked to it with `answer = "none"`. Users on the
three platforms then write 12 messages each, all at once, `"<origin> <n>"`; what each
platform shows of the others is counted as the other bridging tests count it
(`tests.bridge.gateway.count`): delivered, lost, doubled, echoed, mislabelled, out of
order.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from ore_conduit_discord import CHANNEL_KEY, DiscordConduit
from ore_conduit_discord.testing import GUILD, RANDOM, FakeDiscord
from ore_conduit_matrix import CONVERSATION_KEY, MatrixConduit
from ore_conduit_matrix.testing import FakeMatrix
from ore_conduit_slack import SlackConduit
from ore_conduit_slack.testing import FakeSlack
from ore_core.conduit import ControlClient
from ore_core.testing.conduit_conformance import ConduitCore, RunningConduit, StartConduit
from tests.bridge.gateway import PATIENCE, clean, count

pytestmark = [pytest.mark.asyncio, pytest.mark.slow]

CHANNEL = "CGENERAL"  # the fake Slack's channel
SENT = 12  # messages from each endpoint
ENDPOINTS = ("discord", "matrix", "slack")


async def test_a_discord_matrix_slack_gateway_shows_each_side_the_others_once_in_order(
    ore_conduit_core: ConduitCore, ore_start_conduit: StartConduit, tmp_path: Path
) -> None:
    slack = await FakeSlack().start()
    hs = await FakeMatrix().start()
    async with FakeDiscord() as discord:
        conduits: list[RunningConduit] = []
        try:
            room = await hs.create_room()
            discord_settings = {
                "token": discord.token,
                "api_url": f"{discord.url}/api/v10",
                "state_dir": str(tmp_path / "discord"),
                "identify_delay": 0,
            }
            conduits += [
                await ore_start_conduit(SlackConduit, slack.conduit_settings()),
                await ore_start_conduit(DiscordConduit, discord_settings),
                await ore_start_conduit(MatrixConduit, hs.conduit_settings(str(tmp_path / "m"))),
            ]
            await slack.wait_connected(1, PATIENCE)
            await discord.wait_until(lambda: discord.gateway.readied > 0, PATIENCE)
            await hs.wait_until(lambda: hs.waiting > 0, PATIENCE)

            root = await slack.user_says(CHANNEL, "start")
            await slack.wait_until(lambda: len(slack.answers(CHANNEL, root.ts)) == 1, PATIENCE)
            control = ControlClient.beside(ore_conduit_core.client)
            (thread,) = (await control.call("threads.list", {"namespace": "slack"}))["threads"]
            for endpoint in (
                {"namespace": "discord", "key": CHANNEL_KEY, "value": f"{GUILD}:{RANDOM}"},
                {"namespace": "matrix", "key": CONVERSATION_KEY, "value": room},
            ):
                body = {"thread": thread, "endpoint": endpoint, "answer": "none"}
                await control.call("links.add", body)

            shown: dict[str, Callable[[], list[str]]] = {
                "discord": lambda: [t.replace("**", "") for t in discord.bot_texts(RANDOM)],
                "matrix": lambda: hs.bot_texts(room),
                "slack": lambda: slack.rendered_thread(CHANNEL, root.ts),
            }

            async def from_discord() -> None:
                for n in range(SENT):
                    await discord.user_says(RANDOM, f"discord {n}")

            async def from_matrix() -> None:
                for n in range(SENT):
                    await hs.user_says(room, f"matrix {n}")

            async def from_slack() -> None:
                for n in range(SENT):
                    await slack.user_says(CHANNEL, f"slack {n}", thread_ts=root.ts, user="UANA")

            await asyncio.gather(from_discord(), from_matrix(), from_slack())
            sent = {origin: list(range(SENT)) for origin in ENDPOINTS}

            def tally(endpoint: str) -> dict[str, int]:
                others = {o: numbers for o, numbers in sent.items() if o != endpoint}
                return count(shown[endpoint](), endpoint, others)

            wanted = SENT * (len(ENDPOINTS) - 1)
            waits = {
                "discord": discord.wait_until,
                "matrix": hs.wait_until,
                "slack": slack.wait_until,
            }
            try:
                for name, wait in waits.items():  # each platform's view changes with its fake
                    await wait(lambda name=name: tally(name)["delivered"] >= wanted, PATIENCE)
            except TimeoutError:
                pass  # the counts below say what is missing
            counts = {endpoint: tally(endpoint) for endpoint in ENDPOINTS}
            print(f"discord <-> matrix <-> slack: {counts}")
            assert counts == {endpoint: clean(wanted) for endpoint in ENDPOINTS}, {
                e: shown[e]() for e in ENDPOINTS
            }
        finally:
            for conduit in reversed(conduits):  # before their platforms go away
                await conduit.stop()
            await hs.close()
            await slack.close()
