"""The conduit with the real core: answers land where the question was asked."""

from __future__ import annotations

import pytest

from ore_conduit_matrix import MatrixConduit
from ore_conduit_matrix.testing import BOT, MatrixKit
from ore_core import Text
from ore_core.testing.conduit_conformance import ECHO_PREFIX, ConduitCore, StartConduit

pytestmark = pytest.mark.asyncio


async def test_a_question_in_a_thread_is_answered_in_that_thread_replying_to_it(
    ore_start_conduit: StartConduit,
) -> None:
    kit = await MatrixKit.start()
    hs = kit.fake
    try:
        room = await hs.create_room()
        await ore_start_conduit(MatrixConduit, kit.settings())
        await kit.wait_until_ready()
        root = await hs.user_says(room, "root")
        asked = await hs.user_says(room, "in the thread", thread=root)

        def answers() -> list[tuple[str, str]]:
            return [(s.text, s.reply_to) for s in hs.view(room, root) if s.sender == BOT]

        await hs.wait_until(lambda: answers() == [(f"{ECHO_PREFIX}in the thread", asked)])
        await hs.wait_until(lambda: f"{ECHO_PREFIX}root" in hs.bot_texts(room))
        assert hs.bot_texts(room) == [f"{ECHO_PREFIX}root"]
    finally:
        await kit.close()


async def test_an_answer_rate_limited_once_arrives_once_after_the_wait(
    ore_start_conduit: StartConduit,
) -> None:
    kit = await MatrixKit.start()
    hs = kit.fake
    try:
        room = await hs.create_room()
        await ore_start_conduit(MatrixConduit, kit.settings())
        await kit.wait_until_ready()
        hs.fail_next("send", retry_after_ms=50)
        await hs.user_says(room, "slow down")
        await hs.wait_until(lambda: hs.bot_texts(room) == [f"{ECHO_PREFIX}slow down"])
        throttled = [path for name, path in hs.calls if name == "send"]
        assert len(throttled) >= 2  # the 429, then the post that made it
    finally:
        await kit.close()


async def test_an_edited_question_is_answered_again(ore_start_conduit: StartConduit) -> None:
    kit = await MatrixKit.start()
    hs = kit.fake
    try:
        room = await hs.create_room()
        await ore_start_conduit(MatrixConduit, kit.settings())
        await kit.wait_until_ready()
        asked = await hs.user_says(room, "hello")
        await hs.wait_until(lambda: hs.bot_texts(room) == [f"{ECHO_PREFIX}hello"])
        await hs.user_edits(room, asked, "goodbye")
        await hs.wait_until(lambda: f"{ECHO_PREFIX}goodbye" in hs.bot_texts(room))
    finally:
        await kit.close()


async def test_a_redacted_question_reaches_the_core_and_the_room_goes_on(
    ore_start_conduit: StartConduit, ore_conduit_core: ConduitCore
) -> None:
    kit = await MatrixKit.start()
    hs = kit.fake
    try:
        room = await hs.create_room()
        await ore_start_conduit(MatrixConduit, kit.settings())
        await kit.wait_until_ready()
        asked = await hs.user_says(room, "regret")
        await hs.wait_until(lambda: hs.bot_texts(room) == [f"{ECHO_PREFIX}regret"])
        await hs.user_redacts(room, asked)
        await hs.user_says(room, "next")
        await hs.wait_until(lambda: f"{ECHO_PREFIX}next" in hs.bot_texts(room))
        thread = await ore_conduit_core.thread_holding("next")
        said = [a.content for turn in thread.turns() for a in turn.artifacts if isinstance(a, Text)]
        assert "regret" not in said
    finally:
        await kit.close()
