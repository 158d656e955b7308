"""ScriptedPlatform: a platform adapter kept in memory, for testing the engine and its promises.

It is what a platform's fake would be if the platform were a list: every post, edit
and delete lands in `shown` (conversation -> platform id -> text), the test feeds
inbound events with `receive`, and scripts failures with `fail(conversation, *errors)`
(each call for that conversation raises the next one). `conduit_for(platform)` makes
a `PlatformConduit` class that runs it, for `ore_start_conduit`.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict, deque
from collections.abc import AsyncIterator
from typing import ClassVar

from ore_core.conduit.base import ConduitConfig
from ore_core.conduit.capabilities import Capabilities
from ore_core.conduit.engine import PlatformConduit, PlatformContext
from ore_core.conduit.platform import Inbound, Part, Platform, PlatformError

__all__ = ["ScriptedPlatform", "conduit_for"]


class ScriptedPlatform:
    """An in-memory platform (see the module docstring); `calls` counts every post,
    edit and delete asked of it, failed or not."""

    capabilities: ClassVar[Capabilities] = Capabilities(edit=True, delete=True, idempotency="key")

    def __init__(self) -> None:
        self.shown: dict[str, dict[str, str]] = defaultdict(dict)
        self.parts: dict[str, Part] = {}  # platform id -> the part last shown there
        self.calls = 0
        self.changed = asyncio.Condition()
        self.connected = asyncio.Event()  # set once the engine listens both ways
        self._inbound: asyncio.Queue[Inbound] = asyncio.Queue()
        self._failures: dict[str, deque[PlatformError]] = defaultdict(deque)
        self._keys: dict[str, str] = {}  # key -> platform id: a repeated key posts nothing

    def receive(self, event: Inbound) -> None:
        """Hand the engine an inbound event."""
        self._inbound.put_nowait(event)

    def fail(self, conversation: str, *errors: PlatformError) -> None:
        """The next calls for `conversation` raise `errors`, one each, in order."""
        self._failures[conversation].extend(errors)

    async def wait_for(self, conversation: str, count: int) -> list[str]:
        """The texts `conversation` shows, once it shows `count` messages at least."""
        async with self.changed:
            await self.changed.wait_for(lambda: len(self.shown[conversation]) >= count)
            return list(self.shown[conversation].values())

    async def connect(self) -> None:
        self.connected.set()

    async def close(self) -> None:
        return None

    async def events(self) -> AsyncIterator[Inbound]:
        while True:
            yield await self._inbound.get()

    async def _call(self, conversation: str) -> None:
        self.calls += 1
        if self._failures[conversation]:
            raise self._failures[conversation].popleft()

    async def post(self, conversation: str, part: Part, key: str) -> str:
        await self._call(conversation)
        platform_id = self._keys.setdefault(key, f"m{len(self._keys) + 1}")
        await self._show(conversation, platform_id, part)
        return platform_id

    async def edit(self, conversation: str, platform_id: str, part: Part) -> None:
        await self._call(conversation)
        await self._show(conversation, platform_id, part)

    async def delete(self, conversation: str, platform_id: str) -> None:
        await self._call(conversation)
        async with self.changed:
            self.shown[conversation].pop(platform_id, None)
            self.changed.notify_all()

    async def _show(self, conversation: str, platform_id: str, part: Part) -> None:
        async with self.changed:
            self.shown[conversation][platform_id] = part.text
            self.parts[platform_id] = part
            self.changed.notify_all()


def conduit_for(adapter: Platform, name: str = "memo") -> type[PlatformConduit]:
    """A conduit class named `name` (conversations under `<name>.room`) running `adapter`."""

    class Scripted(PlatformConduit):
        capabilities = type(adapter).capabilities
        conversation_key = f"{name}.room"
        copy_deadline = 30.0

        def platform(self, config: ConduitConfig, context: PlatformContext) -> Platform:
            return adapter

    Scripted.name = name
    return Scripted
