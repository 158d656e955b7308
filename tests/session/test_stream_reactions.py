"""Reactions as core events (issue 39): what a thread's Stream records and announces for
a `react`, on a real Manager and real stores; a reaction never runs the processor."""

from __future__ import annotations

from pathlib import Path

import pytest

from ore_core import ErrorEvent, EventContext, Manager
from ore_core.events import EventDecodeError, ReactEvent, ReactionEvent, decode_ingress
from ore_core.session.fanout import Subscription
from ore_core.session.protocols import Store
from ore_core.session.reactions import reactions_of
from ore_core.session.stores.journal_store import JournalStore
from ore_core.session.stores.memory import MemoryStore
from ore_core.session.stores.sqlite_store import SQLiteStore
from ore_core.session.stream import Stream
from ore_core.testing.processors import ScriptedProcessor
from tests.session.support import message

ANA = EventContext(provenance="discord", user="u1", user_name="Ana")
BEN = EventContext(provenance="matrix", user="@ben:example.org", user_name="Ben")


def react(
    turn_id: str, emoji: str = "👍", *, context: EventContext = ANA, **kw: bool
) -> ReactEvent:
    return ReactEvent(turn_id=turn_id, emoji=emoji, context=context, **kw)


def queued(sub: Subscription) -> list[ReactionEvent | ErrorEvent]:
    events = []
    while (event := sub.get_nowait()) is not None:
        assert isinstance(event, ReactionEvent | ErrorEvent)
        events.append(event)
    return events


def reactions(stream: Stream, event_id: str = "m0") -> dict[str, list[str]]:
    turn = next(t for t in stream.state().all_turns() if t.event_id == event_id)
    return reactions_of(turn)


@pytest.fixture
def processor() -> ScriptedProcessor:
    return ScriptedProcessor(["an answer"])


@pytest.fixture
async def stream(processor: ScriptedProcessor) -> Stream:
    async with Manager(MemoryStore(), processor) as manager:
        stream = await manager.create()
        await stream.process(message("hello", id="m0"))
        yield stream  # type: ignore[misc]


async def test_a_reaction_is_recorded_on_the_turn_and_announced(stream: Stream) -> None:
    sub = stream.subscribe("reaction")
    await stream.process(react("m0"))
    (announced,) = queued(sub)
    assert isinstance(announced, ReactionEvent)
    turn_id = next(t.id for t in stream.turns() if t.event_id == "m0")
    assert (announced.turn, announced.emoji, announced.remove) == (turn_id, "👍", False)
    assert announced.reactors == ("discord:u1",)
    assert (announced.excerpt, announced.message) == ("hello", "m0")
    assert reactions(stream) == {"👍": ["discord:u1"]}


async def test_a_reaction_never_runs_the_processor(
    stream: Stream, processor: ScriptedProcessor
) -> None:
    calls = processor.calls
    await stream.process(react("m0"))
    await stream.process(react("m0", remove=True))
    assert processor.calls == calls
    assert len(stream.state()) == 2  # the question and its answer: no new turn


async def test_the_same_reaction_twice_counts_once_and_is_announced_once(stream: Stream) -> None:
    sub = stream.subscribe("reaction")
    await stream.process(react("m0"))
    await stream.process(react("m0"))
    assert len(queued(sub)) == 1
    assert reactions(stream) == {"👍": ["discord:u1"]}


async def test_two_people_with_one_emoji_are_both_counted(stream: Stream) -> None:
    await stream.process(react("m0"))
    await stream.process(react("m0", context=BEN))
    assert reactions(stream) == {"👍": ["discord:u1", "matrix:@ben:example.org"]}


async def test_a_removal_takes_back_only_that_persons_reaction(stream: Stream) -> None:
    await stream.process(react("m0"))
    await stream.process(react("m0", context=BEN))
    sub = stream.subscribe("reaction")
    await stream.process(react("m0", remove=True))
    (announced,) = queued(sub)
    assert isinstance(announced, ReactionEvent)
    assert announced.remove
    assert announced.reactors == ("matrix:@ben:example.org",)
    assert reactions(stream) == {"👍": ["matrix:@ben:example.org"]}


async def test_the_last_removal_leaves_the_turn_without_reactions(stream: Stream) -> None:
    await stream.process(react("m0"))
    await stream.process(react("m0", remove=True))
    turn = next(t for t in stream.turns() if t.event_id == "m0")
    assert dict(turn.extra) == {}


async def test_removing_a_reaction_never_made_changes_and_announces_nothing(
    stream: Stream,
) -> None:
    sub = stream.subscribe("reaction", "error")
    await stream.process(react("m0", remove=True))
    assert queued(sub) == []
    assert reactions(stream) == {}


async def test_a_reaction_to_an_unknown_turn_is_an_unknown_turn_error(stream: Stream) -> None:
    sub = stream.subscribe("reaction", "error")
    await stream.process(react("no-such-message"))
    (error,) = queued(sub)
    assert isinstance(error, ErrorEvent)
    assert error.code == "unknown_turn"
    assert "no-such-message" in error.message


@pytest.mark.parametrize("emoji", ["", "   ", "x" * 65])
def test_an_empty_or_oversized_emoji_is_refused_with_a_clear_error(emoji: str) -> None:
    raw = ReactEvent.model_construct(turn_id="m0", emoji=emoji).model_dump_json()
    with pytest.raises(EventDecodeError, match=r"react\.emoji"):
        decode_ingress(raw)


@pytest.mark.parametrize("kind", ["journal", "sqlite"])
async def test_reactions_survive_a_restart(tmp_path: Path, kind: str) -> None:
    def store() -> Store:
        if kind == "journal":
            return JournalStore(tmp_path / "threads")
        return SQLiteStore(tmp_path / "threads.db")

    async with Manager(store(), ScriptedProcessor(["an answer"])) as manager:
        stream = await manager.create()
        thread_id = stream.id
        await stream.process(message("hello", id="m0"))
        await stream.process(react("m0"))
        await stream.process(react("m0", "🎉", context=BEN))
    async with Manager(store(), ScriptedProcessor(["an answer"])) as manager:
        stream = await manager.attach(thread_id)
        assert reactions(stream) == {"👍": ["discord:u1"], "🎉": ["matrix:@ben:example.org"]}
