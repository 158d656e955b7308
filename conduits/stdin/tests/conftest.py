"""Fixtures for the stdin conduit: a core in this process, and `ore chat` as a real process.

In-process: `start_core(processor)` serves a Manager over the `ore_nats_url` server (from
the ore pytest kit); `stdin_client` is a conduit client named `stdin`;
`make_view()` records what a turn shows (test modules import this file only for
type checkers: pytest's importlib mode).
As a process: `chat_env` isolates config, state and temporary dirs in `tmp_path` and
loads only this conduit and ore-openai; `run_chat` pipes input through `ore chat`;
`spawn_chat` runs it in a pseudo-terminal (pexpect). Every process is gone after the test.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import pexpect
import pytest

from ore_core import ArtifactEvent, Manager, OutputEvent, Text, TurnProcessor
from ore_core.bus.server.streams import BusConfig
from ore_core.bus.service import CoreService
from ore_core.conduit import ConduitClient
from ore_core.session.slash import default_commands
from ore_core.session.stores.memory import MemoryStore

ORE = Path(sys.executable).with_name("ore")
PROCESS_TIMEOUT = 60.0


class RecordingView:
    """A View that keeps every call, for asserting what a turn showed."""

    def __init__(self) -> None:
        self.events: list[OutputEvent] = []
        self.calls: list[str] = []

    def begin(self) -> None:
        self.calls.append("begin")

    def show(self, event: OutputEvent) -> None:
        self.calls.append("show")
        self.events.append(event)

    def end(self) -> None:
        self.calls.append("end")

    def kinds(self) -> list[str]:
        return [event.kind for event in self.events]

    def texts(self) -> list[str]:
        """The complete texts shown, in order."""
        return [
            event.artifact.content
            for event in self.events
            if isinstance(event, ArtifactEvent) and isinstance(event.artifact, Text)
        ]


@pytest.fixture
def make_view() -> type[RecordingView]:
    """`make_view()` makes a fresh RecordingView (test modules cannot import this one)."""
    return RecordingView


@pytest.fixture
async def start_core(
    ore_nats_url: str,
) -> AsyncIterator[Callable[[TurnProcessor], Awaitable[None]]]:
    """`await start_core(processor)`: the core (with the slash commands) serving on `ore_nats_url`.

    `CoreService.start` returns once the control API is registered on the server.
    """
    services: list[CoreService] = []

    async def start(processor: TurnProcessor) -> None:
        service = CoreService(
            Manager(MemoryStore(), processor, interceptors=[default_commands()]),
            servers=[ore_nats_url],
            config=BusConfig(partitions=2),
        )
        await service.start()
        services.append(service)

    yield start
    for service in services:
        await service.stop(grace=0.0)


@pytest.fixture
async def stdin_client(ore_nats_url: str) -> AsyncIterator[ConduitClient]:
    """A conduit client named `stdin`, with short timeouts so failures show quickly."""
    async with await ConduitClient.connect(
        ore_nats_url, name="stdin", request_timeout=2.0, send_deadline=5.0
    ) as client:
        yield client


@pytest.fixture
def chat_env(tmp_path: Path) -> dict[str, str]:
    """The environment of an `ore chat` process: isolated dirs, only the plugins needed."""
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.upper().startswith(("ORE_", "OPENAI_"))
    }
    home = tmp_path / "home"
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    env.update(
        HOME=str(home),
        XDG_CONFIG_HOME=str(home / "config"),
        XDG_STATE_HOME=str(home / "state"),
        TMPDIR=str(temporary),
        ORE_LOAD_PLUGINS="ore-conduit-stdin,ore-openai",
        PROMPT_TOOLKIT_NO_CPR="1",  # a pexpect terminal never answers position requests
        TERM="xterm-256color",
    )
    return env


@pytest.fixture
def run_chat(chat_env: dict[str, str]) -> Callable[..., subprocess.CompletedProcess[str]]:
    """`run_chat(*args, input=..., env={...})`: `ore chat` with `input` piped in."""

    def run(
        *args: str, input: str, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(ORE), "chat", *args],
            input=input,
            capture_output=True,
            text=True,
            env={**chat_env, **(env or {})},
            timeout=PROCESS_TIMEOUT,
            check=False,
        )

    return run


@pytest.fixture
def spawn_chat(chat_env: dict[str, str]) -> Iterator[Callable[..., pexpect.spawn]]:
    """`spawn_chat(*args, env={...})`: `ore chat` in a pseudo-terminal, stopped after the test."""
    children: list[pexpect.spawn] = []

    def spawn(*args: str, env: dict[str, str] | None = None) -> pexpect.spawn:
        child = pexpect.spawn(
            str(ORE),
            ["chat", *args],
            env={**chat_env, **(env or {})},
            encoding="utf-8",
            dimensions=(24, 100),
            timeout=20,
        )
        children.append(child)
        return child

    yield spawn
    for child in children:
        try:
            if child.isalive():
                # SIGTERM lets the chat stop its nats-server; force only if that hangs.
                child.kill(signal.SIGTERM)
                child.expect(pexpect.EOF, timeout=PROCESS_TIMEOUT)
        finally:
            child.close(force=True)
