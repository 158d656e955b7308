"""Edit and regenerate as core events (issues 36, 44): what a thread's Stream records,
answers and announces for them, on a real Manager and store."""

from __future__ import annotations

import pytest

from ore_core import ErrorEvent, EventContext, Manager, OutputEvent, Role, Text, TurnCompleteEvent
from ore_core.endpoint import GATEWAY_ANSWER_KEY
from ore_core.events import EditEvent, RegenerateEvent
from ore_core.session.echo import EchoProcessor
from ore_core.session.fanout import Subscription
from ore_core.session.stores.memory import MemoryStore
from ore_core.session.stream import Stream
from ore_core.testing.processors import GatedProcessor
from ore_core.turn import turn_text
from tests.session.support import collect, message

CONTEXT = EventContext(provenance="test", user="u1", user_name="Ana")


def edit(turn_id: str, content: str, **kwargs: object) -> EditEvent:
    return EditEvent(turn_id=turn_id, content=content, context=CONTEXT, **kwargs)  # type: ignore[arg-type]


def texts(stream: Stream) -> list[str]:
    return [turn_text(t) for t in stream.turns()]


async def conversation(stream: Stream, *questions: str, linked: bool = False) -> None:
    if linked:
        await stream.set_metadata(GATEWAY_ANSWER_KEY, "origin")
    for number, question in enumerate(questions):
        await stream.process(message(question, id=f"m{number}"))


def user_turn(stream: Stream, event_id: str) -> str:
    return next(t.id for t in stream.state().all_turns() if t.event_id == event_id)


@pytest.fixture
async def manager() -> Manager:
    async with Manager(MemoryStore(), EchoProcessor("re: ")) as manager:
        yield manager  # type: ignore[misc]


async def test_an_edit_of_the_latest_message_branches_and_answers_again(manager: Manager) -> None:
    stream = await manager.create()
    await conversation(stream, "one", "two", linked=True)
    await stream.process(edit(user_turn(stream, "m1"), "TWO"))
    assert texts(stream) == ["one", "re: one", "TWO", "re: TWO"]
    revised = stream.turns()[2]
    assert dict(revised.extra)["edit_of"] == user_turn(stream, "m1")


async def test_an_edit_of_an_older_message_on_a_linked_thread_keeps_the_conversation(
    manager: Manager,
) -> None:
    stream = await manager.create()
    await conversation(stream, "one", "two", linked=True)
    tip = stream.state().current_tip
    sub = stream.subscribe("turn_complete")
    await stream.process(edit("m0", "ONE"))
    assert texts(stream) == ["ONE", "re: one", "two", "re: two"]
    assert stream.state().current_tip == tip
    (announced,) = queued(sub)
    assert isinstance(announced, TurnCompleteEvent)
    assert dict(announced.turn.extra) == {"sender": "Ana", "edit_of": user_turn(stream, "m0")}


async def test_an_edit_of_an_older_message_on_an_unlinked_thread_branches(
    manager: Manager,
) -> None:
    stream = await manager.create()
    await conversation(stream, "one", "two")
    await stream.process(edit("m0", "ONE"))
    assert texts(stream) == ["ONE", "re: ONE"]


async def test_an_edit_that_asks_for_no_answer_is_recorded_unanswered(manager: Manager) -> None:
    stream = await manager.create()
    await conversation(stream, "one")
    await stream.process(edit("m0", "ONE", answer=False))
    assert texts(stream) == ["ONE"]


async def test_an_edit_of_an_unknown_message_is_an_error_and_changes_nothing(
    manager: Manager,
) -> None:
    stream = await manager.create()
    await conversation(stream, "one")
    before = stream.state().all_turns()
    sub = stream.subscribe("error")
    await stream.process(edit("no-such-message", "x"))
    (error,) = await collect(sub, until=lambda e: True)
    assert isinstance(error, ErrorEvent)
    assert error.code == "unknown_turn"
    assert stream.state().all_turns() == before


async def test_a_redelivered_edit_is_recorded_and_answered_once(manager: Manager) -> None:
    stream = await manager.create()
    await conversation(stream, "one")
    again = edit("m0", "ONE", id="e1")
    await stream.process(again)
    await stream.process(again)
    assert texts(stream) == ["ONE", "re: ONE"]
    assert len(stream.state().all_turns()) == 4


async def test_a_redelivered_edit_in_place_is_recorded_once(manager: Manager) -> None:
    stream = await manager.create()
    await conversation(stream, "one", "two", linked=True)
    again = edit("m0", "ONE", id="e1")
    await stream.process(again)
    await stream.process(again)
    assert texts(stream) == ["ONE", "re: one", "two", "re: two"]
    assert len(stream.state().all_turns()) == 5


async def test_a_second_edit_revises_the_first_revision(manager: Manager) -> None:
    stream = await manager.create()
    await conversation(stream, "one", "two", linked=True)
    await stream.process(edit("m0", "ONE"))
    first = stream.turns()[0].id
    await stream.process(edit("m0", "ONE!"))
    assert texts(stream)[0] == "ONE!"
    assert dict(stream.turns()[0].extra)["edit_of"] == first


async def test_an_edit_interrupts_the_answer_it_replaces() -> None:
    gate = GatedProcessor()
    async with Manager(MemoryStore(), gate) as manager:
        stream = await manager.create()
        stream.submit(message("one", id="m0"))
        await gate.started.wait()
        sub = stream.subscribe("lifecycle")
        stream.submit(edit("m0", "ONE"))
        gate.release()  # the edit's own answer may run
        events = await collect(sub, count=2)
    phases = [getattr(e, "phase", "") for e in events]
    assert "cancelled" in phases


async def test_a_regenerate_adds_a_sibling_answer_under_the_same_question(
    manager: Manager,
) -> None:
    stream = await manager.create()
    await conversation(stream, "one")
    question, first = stream.turns()
    sub = stream.subscribe("turn_complete")
    await stream.process(RegenerateEvent(turn_id=first.id, context=CONTEXT))
    question_again, second = stream.turns()
    assert question_again == question
    assert second.id != first.id
    assert second.parent_id == first.parent_id == question.id
    announced = queued(sub)
    assert [e.turn.role for e in announced if isinstance(e, TurnCompleteEvent)] == [Role.ASSISTANT]


async def test_a_regenerate_shows_the_model_the_same_messages(manager: Manager) -> None:
    stream = await manager.create()
    await conversation(stream, "one", "two")
    await stream.process(RegenerateEvent(turn_id="m0", context=CONTEXT))
    assert texts(stream) == ["one", "re: one"]
    assert stream.turns()[1].artifacts == (Text("re: one"),)


async def test_a_redelivered_regenerate_is_answered_once(manager: Manager) -> None:
    stream = await manager.create()
    await conversation(stream, "one")
    again = RegenerateEvent(id="r1", turn_id="m0", context=CONTEXT)
    await stream.process(again)
    await stream.process(again)
    assert len(stream.state().all_turns()) == 3


async def test_a_regenerate_of_an_unknown_turn_is_an_error(manager: Manager) -> None:
    stream = await manager.create()
    await conversation(stream, "one")
    sub = stream.subscribe("error")
    await stream.process(RegenerateEvent(turn_id="nope", context=CONTEXT))
    (error,) = await collect(sub, until=lambda e: True)
    assert isinstance(error, ErrorEvent)
    assert error.code == "unknown_turn"
    assert len(stream.state().all_turns()) == 2


def queued(sub: Subscription) -> list[OutputEvent]:
    """What the subscription holds now (the stream handled everything)."""
    events = []
    while (event := sub.get_nowait()) is not None:
        events.append(event)
    return events
