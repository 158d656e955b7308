"""The stdin conduit on piped input, in this process against a real core: one turn per line."""

from __future__ import annotations

import asyncio
import io
from collections.abc import Awaitable, Callable

import pytest

from ore_conduit_stdin import StdinConduit, StdinConfig, StdinError
from ore_conduit_stdin.pipe import read_lines
from ore_core import TurnProcessor
from ore_core.conduit import ConduitClient
from ore_core.session.echo import EchoProcessor
from ore_core.testing.processors import ScriptedProcessor

StartCore = Callable[[TurnProcessor], Awaitable[None]]
TIMEOUT = 30.0


class Pipe:
    """Text in, and what the conduit wrote to stdout and stderr."""

    def __init__(self, text: str) -> None:
        self.stdin = io.StringIO(text)
        self.stdout = io.StringIO()
        self.stderr = io.StringIO()

    async def run(self, client: ConduitClient, config: StdinConfig | None = None) -> None:
        conduit = StdinConduit(self.stdin, self.stdout, self.stderr)
        await asyncio.wait_for(conduit.run(client, config or StdinConfig()), TIMEOUT)


async def test_each_line_is_one_turn_and_the_replies_are_printed_in_order(
    start_core: StartCore, stdin_client: ConduitClient
) -> None:
    await start_core(EchoProcessor())
    pipe = Pipe("first line\nsecond line\nthird line\n")
    await pipe.run(stdin_client)
    assert pipe.stdout.getvalue() == "first line\nsecond line\nthird line\n"


async def test_blank_lines_are_not_sent(start_core: StartCore, stdin_client: ConduitClient) -> None:
    processor = ScriptedProcessor(["ok"])
    await start_core(processor)
    await Pipe("\n  \nhello\n\n").run(stdin_client)
    assert processor.calls == 1


async def test_a_failed_turn_stops_the_run_with_one_line_naming_the_thread(
    start_core: StartCore, stdin_client: ConduitClient
) -> None:
    processor = ScriptedProcessor([RuntimeError("model\nunavailable")])
    await start_core(processor)
    with pytest.raises(StdinError, match=r"^turn failed on thread \S+: .*model unavailable$"):
        await Pipe("one\ntwo\n").run(stdin_client)
    assert processor.calls == 1


async def test_notices_go_to_stderr_with_their_severity(
    start_core: StartCore, stdin_client: ConduitClient
) -> None:
    await start_core(EchoProcessor())
    pipe = Pipe("/help\n")
    await pipe.run(stdin_client)
    assert pipe.stderr.getvalue().startswith("Info: Available commands")
    assert pipe.stdout.getvalue() == ""


async def test_each_piped_run_starts_a_new_thread(
    start_core: StartCore, stdin_client: ConduitClient
) -> None:
    await start_core(EchoProcessor())
    await Pipe("one\n").run(stdin_client)
    await Pipe("two\n").run(stdin_client)
    assert len((await stdin_client.list_threads()).threads) == 2


async def test_the_thread_setting_continues_that_thread(
    start_core: StartCore, stdin_client: ConduitClient
) -> None:
    await start_core(EchoProcessor())
    await Pipe("one\n").run(stdin_client, StdinConfig(thread="notes", new=True))
    await Pipe("two\n").run(stdin_client, StdinConfig(thread="notes"))
    turns = await stdin_client.turns("notes")
    assert [turn.artifacts[0].to_dict()["content"] for turn in turns] == [
        "one",
        "one",
        "two",
        "two",
    ]


async def test_closed_stdin_reads_as_no_lines() -> None:
    assert [line async for line in read_lines(None)] == []


async def test_lines_lose_their_line_endings_only() -> None:
    lines = [line async for line in read_lines(io.StringIO(" a \r\nb\n\nc"))]
    assert lines == [" a ", "b", "", "c"]


async def test_an_unknown_thread_is_an_error_unless_new_is_set(
    start_core: StartCore, stdin_client: ConduitClient
) -> None:
    await start_core(EchoProcessor())
    with pytest.raises(StdinError, match=r"^thread notes not found .*add --new to start it$"):
        await Pipe("one\n").run(stdin_client, StdinConfig(thread="notes"))
    assert (await stdin_client.list_threads()).threads == []


def test_an_invalid_thread_id_is_refused_by_the_settings() -> None:
    with pytest.raises(ValueError, match="invalid thread id"):
        StdinConfig(thread="no spaces")
