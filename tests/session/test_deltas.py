"""Delta pacing and accumulation (ore_core.session.deltas): what the live feed and the
complete artifacts carry, whichever path a delta takes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ore_core import Artifact, ArtifactEvent, Manager, Reasoning, ReasoningDelta, Text, TextDelta
from ore_core.session.deltas import DeltaAccumulator, DeltaPacer
from ore_core.session.echo import EchoProcessor
from ore_core.session.stores.memory import MemoryStore
from tests.session.support import collect, kinds, message

LONG = 3600.0  # an interval no test outlives: only the first delta is due at once


def pacer(interval: float = LONG, max_bytes: int = 4096) -> tuple[DeltaPacer, list[Artifact]]:
    published: list[Artifact] = []
    return DeltaPacer(published.append, interval=interval, max_bytes=max_bytes), published


async def test_the_first_delta_is_published_at_once_and_the_rest_wait_for_the_tick() -> None:
    paced, published = pacer()
    paced.add(TextDelta("Hello"))
    assert published == [TextDelta("Hello")]
    paced.add(TextDelta(" wor"))
    paced.add(TextDelta("ld"))
    assert published == [TextDelta("Hello")]
    paced.finish()
    assert published == [TextDelta("Hello"), TextDelta(" world")]


async def test_held_keys_are_published_in_the_order_they_were_first_seen() -> None:
    paced, published = pacer()
    paced.add(TextDelta("a"))
    paced.add(ReasoningDelta("r"))
    paced.add(TextDelta("b"))
    paced.finish()
    assert published == [TextDelta("a"), TextDelta("b"), ReasoningDelta("r")]


async def test_a_first_delta_over_max_bytes_is_cut_and_the_rest_held() -> None:
    paced, published = pacer(max_bytes=64)
    paced.add(TextDelta("x" * 100))
    assert published == [TextDelta("x" * 64)]
    paced.finish()
    assert published == [TextDelta("x" * 64), TextDelta("x" * 36)]


async def test_an_empty_first_delta_publishes_nothing() -> None:
    paced, published = pacer()
    paced.add(TextDelta(""))
    paced.add(TextDelta("late"))
    paced.finish()
    assert published == [TextDelta("late")]


async def test_after_finish_the_next_delta_waits_for_the_interval() -> None:
    paced, published = pacer()
    paced.add(TextDelta("one"))
    paced.finish()
    paced.add(TextDelta("two"))  # the interval since "one" has not passed
    assert published == [TextDelta("one")]
    paced.finish()
    assert published == [TextDelta("one"), TextDelta("two")]


async def test_without_pacing_every_delta_is_published_as_it_comes() -> None:
    paced, published = pacer(interval=0)
    deltas = [TextDelta("a"), ReasoningDelta("b"), TextDelta("c")]
    for delta in deltas:
        paced.add(delta)
    assert published == deltas


async def test_a_paced_turn_streams_the_first_word_at_once_then_the_rest_then_the_text() -> None:
    async with Manager(MemoryStore(), EchoProcessor(), delta_interval=LONG) as manager:
        stream = await manager.create()
        async with stream.subscribe() as subscription:
            await stream.process(message("hello big world"))
            events = await collect(subscription)
    assert kinds(events) == [
        "turn_complete",
        "lifecycle:submitted",
        "lifecycle:streaming",
        "text_delta",
        "text_delta",
        "text",
        "turn_complete",
        "lifecycle:done",
    ]
    artifacts = [event.artifact for event in events if isinstance(event, ArtifactEvent)]
    assert artifacts == [TextDelta("hello "), TextDelta("big world"), Text("hello big world")]


@dataclass(frozen=True, slots=True)
class ShoutDelta(TextDelta):
    """A plugin's text delta that completes differently from its base class."""

    KIND: ClassVar[str] = "shout_delta"

    def merge_into(self, acc: Artifact | None) -> Artifact:
        return Text(self.content.upper())


def test_accumulated_text_and_reasoning_join_their_parts() -> None:
    accumulator = DeltaAccumulator()
    for delta in (TextDelta("a"), ReasoningDelta("x"), TextDelta("b"), TextDelta("c")):
        accumulator.add(delta)
    assert accumulator.take() == [Text("abc"), Reasoning("x")]
    assert not accumulator


def test_a_delta_subclass_completes_through_its_own_merge_into() -> None:
    accumulator = DeltaAccumulator()
    accumulator.add(ShoutDelta("hey "))
    accumulator.add(ShoutDelta("you"))
    assert accumulator.take() == [Text("HEY YOU")]
