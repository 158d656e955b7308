"""TurnContext: transforms (per-call views that never stack) and artifact handlers.

docs/go-compatibility.md: delta accumulation, and defect 2 (stacked system prompts on
tool round trips).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from ore_core import (
    Artifact,
    ArtifactEvent,
    ErrorEvent,
    LifecycleEvent,
    Manager,
    Role,
    Text,
    ToolCall,
    ToolResult,
    Turn,
    TurnCompleteEvent,
    TurnContext,
    TurnFailed,
    Usage,
)
from ore_core import events as events_module
from ore_core.session.echo import EchoProcessor
from ore_core.session.stores.memory import MemoryStore
from tests.session.support import collect, message


def system_prompt(turns: list[Turn], ctx: TurnContext) -> list[Turn]:
    return [Turn("sys", Role.SYSTEM, (Text("be brief"),)), *turns]


def tag(name: str):  # type: ignore[no-untyped-def]
    def transform(turns: list[Turn], ctx: TurnContext) -> list[Turn]:
        return [*turns, Turn(name, Role.SYSTEM, (Text(name),))]

    return transform


async def answer(*artifacts: Artifact) -> AsyncIterator[Artifact]:
    for artifact in artifacts:
        yield artifact


class ToolLoop:
    """A ReAct-style processor: every call sees a fresh view; tool calls loop back."""

    def __init__(self, rounds: int) -> None:
        self.rounds = rounds
        self.views: list[list[Turn]] = []

    async def __call__(self, ctx: TurnContext) -> None:
        for round_ in range(self.rounds + 1):
            self.views.append(ctx.view())
            if round_ < self.rounds:
                turn = await ctx.step(answer(ToolCall(f"c{round_}", "add", "{}")))
                call = turn.artifacts[0]
                assert isinstance(call, ToolCall)
                await ctx.append(Role.TOOL, ToolResult(call.id, "2"))
            else:
                await ctx.step(answer(Text("done")))


async def test_transforms_apply_in_order_and_never_touch_the_stored_thread() -> None:
    seen: list[list[str]] = []

    async def processor(ctx: TurnContext) -> None:
        seen.append([t.id for t in ctx.view()][-2:])
        await ctx.step(answer(Text("ok")))

    async with Manager(MemoryStore(), processor, transforms=[tag("first"), tag("second")]) as m:
        stream = await m.create()
        await stream.process(message("hi"))
    assert seen == [["first", "second"]]
    assert [t.role for t in stream.turns()] == [Role.USER, Role.ASSISTANT]


async def test_three_tool_round_trips_see_exactly_one_system_turn_each() -> None:
    loop = ToolLoop(rounds=3)
    async with Manager(MemoryStore(), loop, transforms=[system_prompt]) as manager:
        stream = await manager.create()
        await stream.process(message("add things"))
    assert len(loop.views) == 4
    assert [sum(t.role == Role.SYSTEM for t in view) for view in loop.views] == [1, 1, 1, 1]
    assert [t.role for t in stream.turns()] == [
        Role.USER,
        *[Role.ASSISTANT, Role.TOOL] * 3,
        Role.ASSISTANT,
    ]


async def test_a_failing_transform_fails_the_turn_before_the_model_runs() -> None:
    calls = 0

    def broken(turns: list[Turn], ctx: TurnContext) -> list[Turn]:
        raise ValueError("bad transform")

    async def processor(ctx: TurnContext) -> None:
        nonlocal calls
        ctx.view()
        calls += 1

    async with Manager(MemoryStore(), processor, transforms=[broken]) as manager:
        stream = await manager.create()
        sub = stream.subscribe("error")
        with pytest.raises(TurnFailed, match="bad transform"):
            await stream.process(message("hi"))
        assert isinstance((await collect(sub, until=lambda e: True))[0], ErrorEvent)
    assert calls == 0


async def test_handlers_see_every_artifact_in_order_after_turn_complete() -> None:
    seen: list[str] = []

    async def handler(artifact: Artifact, ctx: TurnContext) -> None:
        seen.append(artifact.kind)

    async def processor(ctx: TurnContext) -> None:
        await ctx.step(answer(Text("a"), Usage(1, 2, 3)), handlers=[handler])

    async with Manager(MemoryStore(), processor) as manager:
        stream = await manager.create()
        await stream.process(message("hi"))
    assert seen == ["text", "usage"]


async def test_a_handler_can_record_a_tool_turn() -> None:
    async def run_tools(artifact: Artifact, ctx: TurnContext) -> None:
        if isinstance(artifact, ToolCall):
            await ctx.append(Role.TOOL, ToolResult(artifact.id, "42"))

    async def processor(ctx: TurnContext) -> None:
        await ctx.step(answer(ToolCall("c1", "answer", "{}")), handlers=[run_tools])

    async with Manager(MemoryStore(), processor) as manager:
        stream = await manager.create()
        await stream.process(message("hi"))
    assert [t.role for t in stream.turns()] == [Role.USER, Role.ASSISTANT, Role.TOOL]


async def test_a_failing_handler_fails_the_turn_but_keeps_the_answer() -> None:
    second_ran = False

    async def broken(artifact: Artifact, ctx: TurnContext) -> None:
        raise RuntimeError("handler boom")

    async def second(artifact: Artifact, ctx: TurnContext) -> None:
        nonlocal second_ran
        second_ran = True

    async def processor(ctx: TurnContext) -> None:
        await ctx.step(answer(Text("a")), handlers=[broken, second])

    async with Manager(MemoryStore(), processor) as manager:
        stream = await manager.create()
        with pytest.raises(TurnFailed, match="artifact handler failed: handler boom"):
            await stream.process(message("hi"))
    assert not second_ran
    assert [t.role for t in stream.turns()] == [Role.USER, Role.ASSISTANT]


class _CountingValidator:
    """Stands in for an event class's pydantic validator and counts its calls."""

    def __init__(self, validator: Any) -> None:
        self.validator = validator
        self.calls = 0

    def __getattr__(self, name: str) -> Any:
        self.calls += 1
        return getattr(self.validator, name)


async def test_a_turn_validates_only_the_events_whose_validator_is_cheaper(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Artifacts the core built are trusted (`ArtifactEvent.of` skips the validator's two
    # Python hooks); lifecycle and turn_complete events are cheaper through their
    # model's validator than checked in Python (`LifecycleEvent.of`): once each, never
    # through `BaseModel.__init__`.
    counters = {}
    for cls in (ArtifactEvent, LifecycleEvent, TurnCompleteEvent):
        counters[cls.__name__] = _CountingValidator(cls.__pydantic_validator__)
        monkeypatch.setattr(cls, "__pydantic_validator__", counters[cls.__name__])
    for name, cls in (
        ("_validate_lifecycle", LifecycleEvent),
        ("_validate_turn_complete", TurnCompleteEvent),
    ):
        counter = counters[cls.__name__]  # counts each call's attribute lookup
        monkeypatch.setattr(events_module, name, lambda value, c=counter: c.validate_python(value))
    async with Manager(MemoryStore(), EchoProcessor(), delta_interval=0.1) as manager:
        stream = await manager.create()
        async with stream.subscribe() as subscription:
            await stream.process(message("hello world"))
            events = await collect(subscription)
    assert len(events) == 8  # user turn, submitted, streaming, 2 deltas, text, turn, done
    assert {name: counter.calls for name, counter in counters.items()} == {
        "ArtifactEvent": 0,
        "LifecycleEvent": 3,
        "TurnCompleteEvent": 2,
    }
    assert LifecycleEvent(phase="done") is not None  # the counters do see the constructor
    assert counters["LifecycleEvent"].calls == 4
