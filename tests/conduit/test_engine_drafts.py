"""Drafts through the engine (issue 36): on a platform with drafts (`Drafts`) an answer
being written is shown as a draft, and only the finished answer is posted. A scripted
platform that streams runs as a conduit against a real core on a real nats-server."""

from __future__ import annotations

import asyncio
from typing import ClassVar

from ore_core.conduit import Capabilities, Message, PlatformError, Sender
from ore_core.testing.conduit_conformance import ConduitCore, StartConduit
from ore_core.testing.scripted_platform import ScriptedPlatform
from tests.conduit.test_engine import ROOM, TIMEOUT, start


class DraftingPlatform(ScriptedPlatform):
    """Streams; shows drafts (or refuses them, `refuse`), noting each one's text."""

    capabilities: ClassVar[Capabilities] = Capabilities(
        edit=True, delete=True, streaming=True, idempotency="key"
    )

    def __init__(self, *, refuse: bool = False) -> None:
        super().__init__()
        self.refuse = refuse
        self.drafted: list[str] = []

    def drafts(self, conversation: str) -> bool:
        return True

    async def draft(self, conversation: str, draft_id: str, text: str) -> None:
        async with self.changed:
            self.drafted.append(text)
            self.changed.notify_all()
        if self.refuse:
            raise PlatformError("drafts are not for this chat")


async def test_an_answer_being_written_is_a_draft_and_only_the_finished_one_is_posted(
    ore_conduit_core: ConduitCore, ore_start_conduit: StartConduit
) -> None:
    platform = DraftingPlatform()
    await start(ore_start_conduit, platform)
    gate = ore_conduit_core.processor.gate()
    platform.receive(Message(conversation=ROOM, platform_id="p-1", sender=Sender("Ana"), text="hi"))
    await asyncio.wait_for(gate.started.wait(), TIMEOUT)
    async with platform.changed:
        await asyncio.wait_for(platform.changed.wait_for(lambda: bool(platform.drafted)), TIMEOUT)
    assert platform.shown[ROOM] == {}  # a draft: no message yet
    gate.release()
    (answer,) = await asyncio.wait_for(platform.wait_for(ROOM, 1), TIMEOUT)
    assert platform.drafted == [answer[: len(platform.drafted[0])]]
    assert platform.calls == 1  # one post, no edits


async def test_a_refused_draft_makes_the_answer_stream_by_edits(
    ore_conduit_core: ConduitCore, ore_start_conduit: StartConduit
) -> None:
    platform = DraftingPlatform(refuse=True)
    await start(ore_start_conduit, platform)
    gate = ore_conduit_core.processor.gate()
    platform.receive(Message(conversation=ROOM, platform_id="p-1", sender=Sender("Ana"), text="hi"))
    await asyncio.wait_for(gate.started.wait(), TIMEOUT)
    (streamed,) = await asyncio.wait_for(platform.wait_for(ROOM, 1), TIMEOUT)
    assert platform.drafted == [streamed]  # refused once, then a message
    gate.release()
