"""The stdin conduit passes the conduit conformance kit on a pipe (its fake terminal).

A terminal is one conversation without message ids, and a pipe cannot interrupt; the
kit's checks of those are answered here with the reason they do not apply (Ctrl-C on a
real terminal is tested in test_interactive.py).
"""

from __future__ import annotations

import asyncio
import io
import os
from typing import Any, ClassVar

import pytest

from ore_conduit_stdin import StdinConduit
from ore_core.testing.conduit_conformance import ConduitConformance, ConduitCore, FakePlatform


class _Lines(io.StringIO):
    """A stdout whose complete lines are handed to a queue (the conduit writes from the loop)."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: asyncio.Queue[str] = asyncio.Queue()
        self._partial = ""

    def write(self, text: str) -> int:
        self._partial += text
        *complete, self._partial = self._partial.split("\n")
        for line in complete:
            self.lines.put_nowait(line)
        return super().write(text)


class FakeTerminal:
    """Piped input and captured output of one stdin conduit; every conversation is it."""

    def __init__(self) -> None:
        read, write = os.pipe()
        self.stdin = open(read, encoding="utf-8")  # noqa: SIM115 - closed by close()
        self._keyboard = open(write, "w", encoding="utf-8")  # noqa: SIM115
        self.stdout = _Lines()
        self.stderr = io.StringIO()

    async def wait_until_ready(self) -> None:
        """Lines typed early wait in the pipe until the conduit reads them."""

    async def post_user_message(self, conversation: str, text: str, message_id: str) -> None:
        self._keyboard.write(text + "\n")
        self._keyboard.flush()

    async def wait_for_reply(self, conversation: str) -> str:
        return await self.stdout.lines.get()

    async def interrupt(self, conversation: str) -> None:
        raise NotImplementedError("a pipe cannot interrupt")

    async def close(self) -> None:
        self._keyboard.close()  # end of input: the conduit's reader thread ends
        self.stdin.close()


class PipedStdinConduit(StdinConduit):
    """The stdin conduit on the fake terminal of the running test (the kit passes no args)."""

    terminal: ClassVar[FakeTerminal | None] = None

    def __init__(self) -> None:
        terminal = PipedStdinConduit.terminal
        assert terminal is not None, "open_platform sets the terminal first"
        super().__init__(terminal.stdin, terminal.stdout, terminal.stderr)


class TestStdinConduitConformance(ConduitConformance):
    conduit_class = PipedStdinConduit
    supports_interrupt = False  # on a pipe; Ctrl-C on a terminal: test_interactive.py
    delivers_missed_output = False  # a terminal chat shows live output only

    async def open_platform(self, core: ConduitCore) -> FakePlatform:
        PipedStdinConduit.terminal = FakeTerminal()
        return PipedStdinConduit.terminal

    def conduit_config(self, platform: FakePlatform) -> dict[str, Any]:
        return {"user": "conformance"}

    async def test_a_message_delivered_twice_yields_one_turn(self) -> None:
        pytest.skip("a terminal has no message ids: every line typed is a new message")

    async def test_replies_reach_their_own_conversation(self) -> None:
        pytest.skip("a terminal is one conversation")
