""" "Typing" through the engine (issue 36): a platform that shows that the bot is writing
(`Types`) shows it from the start of each answer of its own until the answer's end. A
scripted platform runs as a conduit against a real core on a real nats-server."""

from __future__ import annotations

import asyncio

from ore_core.conduit import Message, Part, Sender
from ore_core.testing.conduit_conformance import ConduitCore, StartConduit
from ore_core.testing.scripted_platform import ScriptedPlatform
from tests.conduit.test_engine import ROOM, TIMEOUT, start


class TypingPlatform(ScriptedPlatform):
    """Notes its calls in order: `typing`, `post`."""

    def __init__(self) -> None:
        super().__init__()
        self.log: list[str] = []

    async def typing(self, conversation: str) -> None:
        async with self.changed:
            self.log.append(f"typing {conversation}")
            self.changed.notify_all()

    async def post(self, conversation: str, part: Part, key: str) -> str:
        self.log.append(f"post {part.text}")
        return await super().post(conversation, part, key)


async def test_the_conversation_shows_typing_from_the_start_of_an_answer(
    ore_conduit_core: ConduitCore, ore_start_conduit: StartConduit
) -> None:
    platform = TypingPlatform()
    await start(ore_start_conduit, platform)
    gate = ore_conduit_core.processor.gate()
    platform.receive(Message(conversation=ROOM, platform_id="p-1", sender=Sender("Ana"), text="hi"))
    await asyncio.wait_for(gate.started.wait(), TIMEOUT)
    async with platform.changed:  # the turn runs: nothing is posted yet
        await asyncio.wait_for(platform.changed.wait_for(lambda: bool(platform.log)), TIMEOUT)
    assert platform.log == [f"typing {ROOM}"]
    gate.release()
    (answer,) = await asyncio.wait_for(platform.wait_for(ROOM, 1), TIMEOUT)
    assert platform.log[-1] == f"post {answer}"  # typing came before it, and no post
