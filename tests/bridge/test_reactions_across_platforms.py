"""A reaction crosses a linked thread (issue 39): Discord and Matrix conduits on the engine,
each on its fake platform, a real core on a real nats-server. A reaction on Discord shows
on the Matrix copy as the bot's and back, a removal too, each counted once; no reaction
ever starts a model turn."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from ore_conduit_discord import CHANNEL_KEY, DiscordConduit
from ore_conduit_discord.testing import ALICE, GENERAL, GUILD, FakeDiscord
from ore_conduit_discord.testing.fake import BOT_ID
from ore_conduit_matrix import CONVERSATION_KEY, MatrixConduit
from ore_conduit_matrix.testing import ALICE as MATRIX_ALICE
from ore_conduit_matrix.testing import BOT, FakeMatrix
from ore_conduit_matrix.testing.kit import MatrixKit
from ore_core.conduit import ControlClient
from ore_core.session.reactions import reactions_of
from ore_core.testing.conduit_conformance import ECHO_PREFIX, ConduitCore, StartConduit
from ore_core.testing.processors import GatedProcessor
from tests.bus.raw import eventually

THREAD = "bridge-reactions"
TIMEOUT = 30.0


@dataclass
class Bridge:
    """The two fakes, the Matrix room, and the core, with both conduits running."""

    core: ConduitCore
    discord: FakeDiscord
    matrix: FakeMatrix
    room: str

    async def question(self, text: str) -> tuple[str, str]:
        """Alice asks on Discord; (her message's id, the id of its copy in Matrix)
        once the copy is shown and the answer is back on Discord."""
        asked = await self.discord.user_says(GENERAL, text)
        label = f"Alice (discord): {text}"
        await self.matrix.wait_until(
            lambda: any(label in s.text for s in self.matrix.view(self.room)), TIMEOUT
        )
        answer = f"{ECHO_PREFIX}{text}"
        await self.discord.wait_until(lambda: answer in self.discord.bot_texts(GENERAL), TIMEOUT)
        (copy,) = [s.event_id for s in self.matrix.view(self.room) if label in s.text]
        matrix = self.core.client_for("matrix")

        async def reported() -> bool:  # the copy is posted first, then reported
            return await matrix.delivery_lookup(copy) is not None

        await eventually(reported)
        return asked, copy

    async def reactions_in_core(self, asked: str) -> dict[str, list[str]]:
        turns = await self.core.client_for("discord").turns(THREAD)
        return reactions_of(next(t for t in turns if t.event_id == asked))


@pytest.fixture
async def bridge(
    ore_conduit_core: ConduitCore, ore_start_conduit: StartConduit, tmp_path: Path
) -> AsyncIterator[Bridge]:
    kit = await MatrixKit.start()
    try:
        async with FakeDiscord() as discord:
            room = await kit.fake.create_room()
            client = ore_conduit_core.client_for("discord")
            await client.create_thread(THREAD)
            control = ControlClient.beside(ore_conduit_core.client)
            for namespace, key, value in (
                ("discord", CHANNEL_KEY, f"{GUILD}:{GENERAL}"),
                ("matrix", CONVERSATION_KEY, room),
            ):
                endpoint = {"namespace": namespace, "key": key, "value": value}
                await control.call("links.add", {"thread": THREAD, "endpoint": endpoint})
            settings = {
                "token": discord.token, "api_url": f"{discord.url}/api/v10",
                "state_dir": str(tmp_path / "discord"), "identify_delay": 0,
            }  # fmt: skip
            await ore_start_conduit(DiscordConduit, settings)
            await discord.wait_until(lambda: discord.gateway.readied > 0, TIMEOUT)
            await ore_start_conduit(MatrixConduit, kit.settings())
            await kit.fake.wait_until(lambda: kit.fake.waiting > 0, TIMEOUT)
            yield Bridge(ore_conduit_core, discord, kit.fake, room)
    finally:
        await kit.close()


def model(bridge: Bridge) -> GatedProcessor:
    """From now on every model turn is held and counted (`calls`)."""
    return bridge.core.processor.gate()


async def test_a_reaction_on_discord_shows_on_the_matrix_copy_once(bridge: Bridge) -> None:
    asked, copy = await bridge.question("hello")
    await bridge.discord.user_reacts(GENERAL, asked, "👍")
    await bridge.matrix.wait_until(lambda: bridge.matrix.reactions_on(copy) != {}, TIMEOUT)
    assert bridge.matrix.reactions_on(copy) == {"👍": [BOT]}
    assert await bridge.reactions_in_core(asked) == {"👍": [f"discord:{ALICE}"]}


async def test_a_reaction_on_the_matrix_copy_shows_on_the_discord_message(bridge: Bridge) -> None:
    asked, copy = await bridge.question("hello")
    await bridge.matrix.user_reacts(bridge.room, copy, "🎉")
    await bridge.discord.wait_until(
        lambda: bridge.discord.reactions_on(GENERAL, asked) != {}, TIMEOUT
    )
    assert bridge.discord.reactions_on(GENERAL, asked) == {"🎉": [BOT_ID]}
    assert await bridge.reactions_in_core(asked) == {"🎉": [f"matrix:{MATRIX_ALICE}"]}


async def test_a_removal_on_either_side_takes_the_reaction_back_on_the_other(
    bridge: Bridge,
) -> None:
    asked, copy = await bridge.question("hello")
    await bridge.discord.user_reacts(GENERAL, asked, "👍")
    mine = await bridge.matrix.user_reacts(bridge.room, copy, "🎉")
    await bridge.matrix.wait_until(lambda: "👍" in bridge.matrix.reactions_on(copy), TIMEOUT)
    await bridge.discord.wait_until(
        lambda: "🎉" in bridge.discord.reactions_on(GENERAL, asked), TIMEOUT
    )
    await bridge.discord.user_reacts(GENERAL, asked, "👍", remove=True)
    await bridge.matrix.user_redacts(bridge.room, mine)
    await bridge.matrix.wait_until(lambda: bridge.matrix.reactions_on(copy) == {}, TIMEOUT)
    await bridge.discord.wait_until(
        lambda: bridge.discord.reactions_on(GENERAL, asked) == {}, TIMEOUT
    )
    assert await bridge.reactions_in_core(asked) == {}


async def test_the_same_emoji_on_both_sides_is_counted_once_per_person(bridge: Bridge) -> None:
    asked, copy = await bridge.question("hello")
    await bridge.discord.user_reacts(GENERAL, asked, "👍")
    await bridge.matrix.wait_until(lambda: bridge.matrix.reactions_on(copy) != {}, TIMEOUT)
    await bridge.matrix.user_reacts(bridge.room, copy, "👍")
    await bridge.discord.wait_until(
        lambda: len(bridge.discord.reactions_on(GENERAL, asked).get("👍", [])) == 2, TIMEOUT
    )
    assert bridge.matrix.reactions_on(copy) == {"👍": [BOT, MATRIX_ALICE]}
    assert bridge.discord.reactions_on(GENERAL, asked) == {"👍": [ALICE, BOT_ID]}
    people = [f"discord:{ALICE}", f"matrix:{MATRIX_ALICE}"]
    assert await bridge.reactions_in_core(asked) == {"👍": people}


async def test_reactions_never_start_a_model_turn(bridge: Bridge) -> None:
    asked, copy = await bridge.question("hello")
    gated = model(bridge)
    await bridge.discord.user_reacts(GENERAL, asked, "👍")
    await bridge.matrix.user_reacts(bridge.room, copy, "🎉")
    await bridge.discord.user_reacts(GENERAL, asked, "👍", remove=True)
    await bridge.discord.wait_until(
        lambda: "🎉" in bridge.discord.reactions_on(GENERAL, asked), TIMEOUT
    )
    only_hers = {"🎉": [MATRIX_ALICE]}  # the bot's 👍 came and went
    await bridge.matrix.wait_until(lambda: bridge.matrix.reactions_on(copy) == only_hers, TIMEOUT)
    assert gated.calls == 0
    await bridge.discord.user_says(GENERAL, "a question")  # the count counts a turn
    await asyncio.wait_for(gated.started.wait(), TIMEOUT)
    assert gated.calls == 1
    gated.release()
