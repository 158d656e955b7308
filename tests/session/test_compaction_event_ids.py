"""A compaction copies the kept turns with their event ids, so two turns share one: an
edit, a delete and a redelivered message find the turn on the active path (the copy),
not the original the summary's branch left behind. Real Manager, store and compactor."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

import pytest

from ore_core import EventContext, Manager, Role
from ore_core.config import CompactionSettings
from ore_core.endpoint import GATEWAY_ANSWER_KEY
from ore_core.events import DeleteEvent, EditEvent
from ore_core.session.compaction import COPY_OF
from ore_core.session.compactor import Compactor
from ore_core.session.echo import EchoProcessor
from ore_core.session.stores.memory import MemoryStore
from ore_core.session.stream import Stream
from ore_core.turn import Turn, turn_text
from tests.session.support import message

CONTEXT = EventContext(provenance="test", user="u1", user_name="Ana")


async def summarise(turns: Sequence[Turn], prompt: str, model: str) -> str:
    return "s"


@pytest.fixture
async def compacted() -> AsyncIterator[Stream]:
    """A linked thread of six exchanges compacted to the summary and the last exchange
    (m5 and its answer are copies on the active path)."""
    compactor = Compactor(
        CompactionSettings(enabled=False, keep_last=2, pin_first=False), summarise
    )
    async with Manager(MemoryStore(), EchoProcessor("re: "), interceptors=[compactor]) as manager:
        stream = await manager.create()
        await stream.set_metadata(GATEWAY_ANSWER_KEY, "origin")
        for number in range(6):
            await stream.process(message(f"q{number}", id=f"m{number}"))
        await stream.process(message("/compact"))
        assert [dict(t.extra).get(COPY_OF) is not None for t in stream.turns()] == [
            False,
            True,
            True,
        ]
        yield stream


def texts(stream: Stream) -> list[str]:
    return [turn_text(t) for t in stream.turns()[1:]]  # after the summary


def original(stream: Stream, event_id: str) -> Turn:
    return next(t for t in stream.state().all_turns() if t.event_id == event_id)


async def test_an_edit_by_event_id_of_a_kept_latest_message_revises_the_copy(
    compacted: Stream,
) -> None:
    await compacted.process(EditEvent(turn_id="m5", content="Q5", context=CONTEXT))
    assert texts(compacted) == ["Q5", "re: Q5"]


async def test_an_edit_by_the_original_turn_id_revises_the_copy(compacted: Stream) -> None:
    turn_id = original(compacted, "m5").id  # what endpoints were told before the compaction
    await compacted.process(EditEvent(turn_id=turn_id, content="Q5", context=CONTEXT))
    assert texts(compacted) == ["Q5", "re: Q5"]


async def test_a_delete_by_event_id_of_a_kept_message_hides_the_copy(compacted: Stream) -> None:
    await compacted.process(DeleteEvent(turn_id="m5", context=CONTEXT))
    assert texts(compacted) == ["re: q5"]


async def test_a_redelivered_kept_message_is_not_answered_again(compacted: Stream) -> None:
    before = len(compacted.state().all_turns())
    await compacted.process(message("q5", id="m5"))
    assert len(compacted.state().all_turns()) == before
    assert texts(compacted) == ["q5", "re: q5"]


async def test_an_edit_of_a_summarised_message_is_kept_off_the_compacted_path(
    compacted: Stream,
) -> None:
    """The bridging rule for an older message on a linked thread: revised in place, the
    conversation stays where it is (here: the summary's branch), nothing answered."""
    tip = compacted.state().current_tip
    await compacted.process(EditEvent(turn_id="m1", content="Q1", context=CONTEXT))
    assert compacted.state().current_tip == tip
    assert texts(compacted) == ["q5", "re: q5"]
    revised = [t for t in compacted.state().all_turns() if turn_text(t) == "Q1"]
    assert [t.role for t in revised] == [Role.USER]
