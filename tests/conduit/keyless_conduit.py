"""A conduit process whose platform takes no idempotency keys, for the kill -9 tests.

`python -m tests.conduit.keyless_conduit NATS_URL LOG HOLD` runs the engine (as
`memo`, conversations under `memo.room`) around a platform that appends each post and
edit to the JSON-lines file LOG (written through: a kill -9 loses none of it) and never
returns from post number HOLD (0: none), after noting it as `held` in LOG: the test
kills the process there, in the middle of an answer.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import ClassVar

from ore_core.conduit import Capabilities, ConduitClient, Inbound, Part
from ore_core.testing.scripted_platform import conduit_for

LENGTH = 64  # the longest message: an answer of a few words is several parts


class KeylessFilePlatform:
    """Posts and edits as lines of a file (see the module docstring)."""

    capabilities: ClassVar[Capabilities] = Capabilities(
        edit=True, max_message_length=LENGTH, idempotency="none"
    )

    def __init__(self, log: Path, hold: int) -> None:
        self.log = log
        self.hold = hold
        self.posts = 0
        self._inbound: asyncio.Queue[Inbound] = asyncio.Queue()  # never fed

    def _write(self, **line: object) -> None:
        with self.log.open("a") as out:
            out.write(json.dumps(line) + "\n")

    async def connect(self) -> None:
        self._write(op="connected")

    async def close(self) -> None:
        return None

    async def events(self) -> AsyncIterator[Inbound]:
        while True:  # none: the test talks to the core as this conduit
            yield await self._inbound.get()

    async def post(self, conversation: str, part: Part, key: str) -> str:
        self.posts += 1
        if self.posts == self.hold:
            self._write(op="held", text=part.text)
            await asyncio.Event().wait()  # killed now
        platform_id = f"{self.log.stat().st_size}"  # unique across runs: the file grows
        self._write(op="post", id=platform_id, text=part.text, repeat=part.repeat)
        return platform_id

    async def edit(self, conversation: str, platform_id: str, part: Part) -> None:
        self._write(op="edit", id=platform_id, text=part.text)

    async def delete(self, conversation: str, platform_id: str) -> None:
        self._write(op="delete", id=platform_id)


async def main(nats_url: str, log: Path, hold: int) -> None:
    conduit = conduit_for(KeylessFilePlatform(log, hold))
    client = await ConduitClient.connect(nats_url, name=conduit.name)
    try:
        await conduit().run(client, conduit.load_config({}))
    finally:
        await client.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])))
