"""The engine's answer record (issue 36): on a platform without idempotency keys each part
of an answer is claimed before it is posted and recorded after, so a conduit stopped in
the middle of an answer (its durable feed gives it the answer again) posts it once. A
scripted platform that takes no keys (every post is a new message) runs as a conduit
against a real core on a real nats-server; the stop comes while a post is under way,
where a kill -9 leaves the record."""

from __future__ import annotations

import asyncio
from typing import ClassVar

from ore_core.conduit import Capabilities, Message, Part, Sender
from ore_core.conduit.relay import split_message
from ore_core.testing.conduit_conformance import ConduitCore, RunningConduit, StartConduit
from ore_core.testing.scripted_platform import ScriptedPlatform, conduit_for
from tests.conduit.test_engine import ROOM, TIMEOUT

LONG = " ".join(f"word{n}" for n in range(30))  # its echo is four parts of 64 at most
ECHO = f"echo: {LONG}"


class KeylessPlatform(ScriptedPlatform):
    """A platform without keys: every post is a new message. Post number `hold` never
    returns (the conduit is stopped while it is under way); `shows_held`: the platform
    showed that post before the stop (it landed, unrecorded)."""

    capabilities: ClassVar[Capabilities] = Capabilities(
        edit=True, delete=True, max_message_length=64, idempotency="none"
    )

    def __init__(self, *, hold: int = 0, shows_held: bool = False) -> None:
        super().__init__()
        self.hold = hold
        self.shows_held = shows_held
        self.posts: list[Part] = []
        self.held = asyncio.Event()

    async def post(self, conversation: str, part: Part, key: str) -> str:
        self.posts.append(part)
        platform_id = self._keys[key] = f"m{len(self.posts)}"
        if len(self.posts) == self.hold:
            if self.shows_held:
                await self._show(conversation, platform_id, part)
            self.held.set()
            await asyncio.Event().wait()  # the stop comes now
        await self._show(conversation, platform_id, part)
        return platform_id


class ReadBackPlatform(KeylessPlatform):
    """A platform without keys that can find what a key posted (`ReadsBack`)."""

    capabilities: ClassVar[Capabilities] = KeylessPlatform.capabilities.model_copy(
        update={"idempotency": "read_back"}
    )

    async def find(self, conversation: str, key: str) -> str | None:
        found = self._keys.get(key)
        return found if found in self.shown[conversation] else None


async def stopped_at_the_second_part(
    ore_start_conduit: StartConduit, platform: KeylessPlatform
) -> RunningConduit:
    """The conduit, stopped while it posted the second part of the answer to LONG."""
    conduit = await ore_start_conduit(conduit_for(platform), {})
    await asyncio.wait_for(platform.connected.wait(), TIMEOUT)
    platform.receive(Message(conversation=ROOM, platform_id="p-1", sender=Sender("Ana"), text=LONG))
    await asyncio.wait_for(platform.held.wait(), TIMEOUT)
    await conduit.stop()
    platform.hold = 0
    return conduit


async def restarted_and_answered(conduit: RunningConduit, platform: KeylessPlatform) -> list[str]:
    """Restart the conduit, ask once more; what the room shows once that answer is there
    (a thread's answers are shown in order: the first one is done by then)."""
    await conduit.start()
    platform.receive(Message(conversation=ROOM, platform_id="p-2", sender=Sender("Ana"), text="x"))
    async with platform.changed:
        await asyncio.wait_for(
            platform.changed.wait_for(lambda: "echo: x" in platform.shown[ROOM].values()),
            TIMEOUT,
        )
    return list(platform.shown[ROOM].values())


async def test_an_answer_stopped_midway_is_shown_once_after_the_restart(
    ore_conduit_core: ConduitCore, ore_start_conduit: StartConduit
) -> None:
    platform = KeylessPlatform(hold=2)
    conduit = await stopped_at_the_second_part(ore_start_conduit, platform)
    shown = await restarted_and_answered(conduit, platform)
    assert shown == [*split_message(ECHO, 64), "echo: x"]


async def test_the_part_recorded_before_the_stop_is_not_posted_again(
    ore_conduit_core: ConduitCore, ore_start_conduit: StartConduit
) -> None:
    platform = KeylessPlatform(hold=2)
    conduit = await stopped_at_the_second_part(ore_start_conduit, platform)
    await restarted_and_answered(conduit, platform)
    first = split_message(ECHO, 64)[0]
    assert [part.text for part in platform.posts].count(first) == 1


async def test_the_part_under_way_at_the_stop_is_posted_again_marked_as_a_repeat(
    ore_conduit_core: ConduitCore, ore_start_conduit: StartConduit
) -> None:
    platform = KeylessPlatform(hold=2, shows_held=True)
    conduit = await stopped_at_the_second_part(ore_start_conduit, platform)
    await restarted_and_answered(conduit, platform)
    second = split_message(ECHO, 64)[1]
    assert [(p.text, p.repeat) for p in platform.posts if p.text == second] == [
        (second, False),
        (second, True),
    ]


async def test_a_platform_that_reads_back_finds_the_parts_it_posted_before_the_stop(
    ore_conduit_core: ConduitCore, ore_start_conduit: StartConduit
) -> None:
    platform = ReadBackPlatform(hold=2, shows_held=True)
    conduit = await stopped_at_the_second_part(ore_start_conduit, platform)
    shown = await restarted_and_answered(conduit, platform)
    assert shown == [*split_message(ECHO, 64), "echo: x"]
