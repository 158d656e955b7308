"""ChatSession against a real core over a real nats-server: turns, filtering, interrupt, /new."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import pytest

from ore_conduit_stdin.session import ChatSession, new_traceparent
from ore_core import TurnCompleteEvent, TurnProcessor
from ore_core.conduit import BusError, ConduitClient
from ore_core.session.echo import EchoProcessor
from ore_core.testing.processors import GatedProcessor, ScriptedProcessor

if TYPE_CHECKING:
    from conftest import RecordingView

StartCore = Callable[[TurnProcessor], Awaitable[None]]
MakeView = Callable[[], "RecordingView"]
TIMEOUT = 30.0


def test_a_traceparent_is_a_w3c_trace_context_with_a_fresh_trace_id() -> None:
    first, second = new_traceparent(), new_traceparent()
    version, trace_id, span_id, flags = first.split("-")
    assert (version, len(trace_id), len(span_id), flags) == ("00", 32, 16, "01")
    assert trace_id != second.split("-")[1]


async def test_a_turn_shows_the_reply_between_begin_and_end(
    start_core: StartCore, stdin_client: ConduitClient, make_view: MakeView
) -> None:
    await start_core(ScriptedProcessor(["hello there"]))
    view = make_view()
    async with ChatSession(stdin_client, await stdin_client.create_thread()) as session:
        result = await asyncio.wait_for(session.turn("hi", view), TIMEOUT)
    assert result.error is None
    assert not result.cancelled
    assert view.texts() == ["hello there"]
    assert view.calls[0] == "begin"
    assert view.calls[-1] == "end"


async def test_the_users_own_message_is_not_shown_again(
    start_core: StartCore, stdin_client: ConduitClient, make_view: MakeView
) -> None:
    await start_core(EchoProcessor())
    view = make_view()
    async with ChatSession(stdin_client, await stdin_client.create_thread()) as session:
        await asyncio.wait_for(session.turn("hi", view), TIMEOUT)
    roles = [event.turn.role for event in view.events if isinstance(event, TurnCompleteEvent)]
    assert roles == ["assistant"]


async def test_another_conduit_cannot_write_into_the_session_or_show_in_it(
    start_core: StartCore, stdin_client: ConduitClient, ore_nats_url: str, make_view: MakeView
) -> None:
    await start_core(ScriptedProcessor(["for stdin"]))
    thread_id = await stdin_client.create_thread()
    view = make_view()
    async with (
        await ConduitClient.connect(ore_nats_url, name="other") as other,
        ChatSession(stdin_client, thread_id) as session,
    ):
        # The thread is stdin's: for conduit `other` it does not exist (it gets an error
        # on its own subject); nothing of it reaches the session.
        async with other.events(thread_id, kinds={"error"}) as refused:
            await other.send(thread_id, "first")
            [error] = [await asyncio.wait_for(anext(refused), TIMEOUT)]
        await asyncio.wait_for(session.turn("second", view), TIMEOUT)
    assert error.event.code == "unknown_thread"
    assert view.texts() == ["for stdin"]
    assert len(await stdin_client.turns(thread_id)) == 2


async def test_a_failed_turn_reports_the_error(
    start_core: StartCore, stdin_client: ConduitClient, make_view: MakeView
) -> None:
    await start_core(ScriptedProcessor([RuntimeError("model unavailable")]))
    view = make_view()
    async with ChatSession(stdin_client, await stdin_client.create_thread()) as session:
        result = await asyncio.wait_for(session.turn("hi", view), TIMEOUT)
    assert result.error is not None
    assert "model unavailable" in result.error
    assert "error" in view.kinds()


async def test_an_interrupt_cancels_the_running_turn(
    start_core: StartCore, stdin_client: ConduitClient, make_view: MakeView
) -> None:
    processor = GatedProcessor()
    await start_core(processor)
    async with ChatSession(stdin_client, await stdin_client.create_thread()) as session:
        turn = asyncio.ensure_future(session.turn("hi", make_view()))
        await asyncio.wait_for(processor.started.wait(), TIMEOUT)
        session.interrupt()
        result = await asyncio.wait_for(turn, TIMEOUT)
    assert result.cancelled
    assert processor.cancelled == 1


async def test_the_turn_after_an_interrupt_ends_at_its_own_done(
    start_core: StartCore, stdin_client: ConduitClient, make_view: MakeView
) -> None:
    processor = GatedProcessor(reply="second reply")
    await start_core(processor)
    view = make_view()
    async with ChatSession(stdin_client, await stdin_client.create_thread()) as session:
        turn = asyncio.ensure_future(session.turn("one", make_view()))
        await asyncio.wait_for(processor.started.wait(), TIMEOUT)
        session.interrupt()
        await asyncio.wait_for(turn, TIMEOUT)
        processor.release()
        # The interrupt's own `done` comes after the first turn ended; it must not end
        # this turn before its reply.
        result = await asyncio.wait_for(session.turn("two", view), TIMEOUT)
    assert not result.cancelled
    assert view.texts() == ["…second reply"]


async def test_interrupt_while_idle_sends_nothing(
    start_core: StartCore, stdin_client: ConduitClient, make_view: MakeView
) -> None:
    await start_core(ScriptedProcessor(["ok"]))
    view = make_view()
    async with ChatSession(stdin_client, await stdin_client.create_thread()) as session:
        session.interrupt()
        result = await asyncio.wait_for(session.turn("hi", view), TIMEOUT)
    assert not result.cancelled
    assert view.texts() == ["ok"]


async def test_new_moves_the_session_to_the_new_thread(
    start_core: StartCore, stdin_client: ConduitClient, make_view: MakeView
) -> None:
    await start_core(EchoProcessor())
    first = await stdin_client.create_thread()
    view = make_view()
    async with ChatSession(stdin_client, first) as session:
        result = await asyncio.wait_for(session.turn("/new", make_view()), TIMEOUT)
        assert result.switched_to is not None
        assert session.thread_id == result.switched_to != first
        await asyncio.wait_for(session.turn("on the new thread", view), TIMEOUT)
    assert view.texts() == ["on the new thread"]
    assert len(await stdin_client.turns(result.switched_to)) == 2
    assert await stdin_client.turns(first) == []


async def test_a_turn_outside_the_context_manager_is_refused(
    stdin_client: ConduitClient, make_view: MakeView
) -> None:
    with pytest.raises(BusError, match="not open"):
        await ChatSession(stdin_client, "t1").turn("hi", make_view())
