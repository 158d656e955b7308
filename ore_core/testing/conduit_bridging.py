"""The bridging part of the conduit conformance kit: a conduit in a gateway, counted.

A conduit that passes `ConduitConformance` adds `BridgingConformance` to its test class
(same fake, same fixtures)::

    class TestRoomConduit(ConduitConformance, BridgingConformance):
        conduit_class = RoomConduit
        ...

The check links one of the conduit's conversations to a thread of a reference endpoint
(a client of namespace `ref`, as a conduit speaks to the core), with no answers (a pure
human relay), sends `bridged_messages` messages each way at once, and counts on each
side what arrived: delivered, lost, doubled, echoed (a side's own message shown back
to it), mislabelled (a copy without its sender's label) and out of order. Every count
but `delivered` must be 0. A message that closes each direction (sent last) tells the
reader that everything before it has come.
"""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from itertools import pairwise
from typing import ClassVar

from ore_core.conduit.client import ConduitClient
from ore_core.conduit.control import ControlClient
from ore_core.conduit.feed import EventFeed
from ore_core.conduit.relay import turn_text
from ore_core.events import TurnCompleteEvent, new_event_id
from ore_core.testing.conduit_conformance import (
    TIMEOUT,
    ConduitConformance,
    ConduitCore,
    FakePlatform,
    RunningConduit,
)
from ore_core.turn import Role

__all__ = ["BridgingConformance", "Tally"]

REFERENCE = "ref"
"""The reference endpoint's namespace."""
_TOKEN = re.compile(r"\b(to|from)-(\d+|end)\b")

Tally = dict[str, int]
"""delivered, lost, doubled, echoed, mislabelled, out_of_order."""


def tally(seen: list[str], sent: int, *, own: str, label: str) -> Tally:
    """The counts of one side, from the texts it showed (in order) until the closing
    message: `own` is the direction of its own messages (an echo if shown), `label`
    what every copy must carry."""
    numbers: list[int] = []
    echoed = mislabelled = 0
    for text in seen:
        found = _TOKEN.search(text)
        if found is None or found[2] == "end":
            continue
        if found[1] == own:
            echoed += 1
            continue
        numbers.append(int(found[2]))
        mislabelled += label not in text
    counts = Counter(numbers)
    return {
        "delivered": len(counts),
        "lost": sum(1 for n in range(sent) if n not in counts),
        "doubled": sum(c - 1 for c in counts.values()),
        "echoed": echoed,
        "mislabelled": mislabelled,
        "out_of_order": sum(1 for a, b in pairwise(numbers) if b < a),
    }


class BridgingConformance:
    """Add to a `ConduitConformance` subclass: the gateway check (module docstring).

    `bridged_conversation` is the conversation of the fake the check links; override
    `endpoint_value` when the conduit's `conversation_key` spells it otherwise.
    """

    bridged_messages: ClassVar[int] = 10
    bridged_conversation: ClassVar[str] = "bridged"

    def endpoint_value(self, conversation: str) -> str:
        """The link's value (the conduit's `conversation_key`) for `conversation`."""
        return conversation

    async def test_a_gateway_shows_each_side_the_other_s_messages_once_in_order(
        self, ore_conduit_core: ConduitCore, conduit: RunningConduit, platform: FakePlatform
    ) -> None:
        assert isinstance(self, ConduitConformance)
        conduit_class = self.conduit_class
        conversation = self.bridged_conversation
        reference = ore_conduit_core.client_for(REFERENCE)
        thread = await reference.create_thread()
        endpoint = {
            "namespace": conduit_class.name,
            "key": conduit_class.conversation_key,
            "value": self.endpoint_value(conversation),
        }
        body = {"thread": thread, "endpoint": endpoint, "answer": "none"}
        await ControlClient.beside(ore_conduit_core.client).call("links.add", body)
        count = self.bridged_messages
        async with reference.events(thread, kinds={"turn_complete"}) as feed:
            await asyncio.gather(
                self._from_platform(platform, conversation, count),
                self._from_reference(reference, thread, count),
            )
            async with asyncio.timeout(TIMEOUT * 3):
                on_platform = await self._platform_shows(platform, conversation)
                on_reference = await self._reference_shows(feed, conduit_class.name)
        zero = {"lost": 0, "doubled": 0, "echoed": 0, "mislabelled": 0, "out_of_order": 0}
        counts = {
            "platform": tally(on_platform, count, own="from", label=f"Ana ({REFERENCE})"),
            "reference": tally(on_reference, count, own="to", label=""),
        }
        assert counts == {side: {"delivered": count, **zero} for side in counts}

    @staticmethod
    async def _from_platform(platform: FakePlatform, conversation: str, count: int) -> None:
        for n in [*map(str, range(count)), "end"]:
            await platform.post_user_message(conversation, f"from-{n}", new_event_id())

    @staticmethod
    async def _from_reference(reference: ConduitClient, thread: str, count: int) -> None:
        for n in [*map(str, range(count)), "end"]:
            await reference.send(thread, f"to-{n}", user_name="Ana")

    @staticmethod
    async def _platform_shows(platform: FakePlatform, conversation: str) -> list[str]:
        seen: list[str] = []
        while not seen or "to-end" not in seen[-1]:
            seen.append(await platform.wait_for_reply(conversation))
        return seen

    @staticmethod
    async def _reference_shows(feed: EventFeed, namespace: str) -> list[str]:
        seen: list[str] = []
        async for delivery in feed:
            event = delivery.event
            if not isinstance(event, TurnCompleteEvent) or event.turn.role != Role.USER:
                continue
            text = turn_text(event.turn)
            if event.context.provenance == namespace:
                seen.append(text)
            if "from-end" in text:
                break
        return seen
