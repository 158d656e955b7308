"""Running a model's tool calls: one result per call, failures as error results."""

from __future__ import annotations

import asyncio
from typing import Any

from ore_core import Tool, ToolCall, ToolResult
from ore_openai.tool_runner import run_tool_call, run_tool_calls

OBJECT = {"type": "object"}


async def add(a: int, b: int) -> dict[str, int]:
    return {"sum": a + b}


async def greet(name: str = "world") -> str:
    return f"hello {name}"


async def explode() -> None:
    raise RuntimeError("disk on fire")


TOOLS = {
    "add": Tool("add", "Adds", OBJECT, add),
    "greet": Tool("greet", "Greets", OBJECT, greet),
    "explode": Tool("explode", "Fails", OBJECT, explode),
}


async def test_a_structured_result_is_sent_as_json_and_kept_as_value() -> None:
    result = await run_tool_call(TOOLS, ToolCall("c1", "add", '{"a": 2, "b": 3}'))
    assert result == ToolResult("c1", content='{"sum":5}', value={"sum": 5})


async def test_a_string_result_is_sent_verbatim() -> None:
    result = await run_tool_call(TOOLS, ToolCall("c1", "greet", '{"name": "ore"}'))
    assert result.llm_string() == "hello ore"


async def test_empty_arguments_call_the_tool_without_arguments() -> None:
    result = await run_tool_call(TOOLS, ToolCall("c1", "greet", ""))
    assert result.content == "hello world"


async def test_an_unknown_tool_is_an_error_result_naming_the_known_ones() -> None:
    result = await run_tool_call(TOOLS, ToolCall("c1", "weather", "{}"))
    assert result.is_error
    assert result.content == 'tool "weather" not found (available tools: add, explode, greet)'


async def test_arguments_that_are_not_json_are_an_error_result() -> None:
    result = await run_tool_call(TOOLS, ToolCall("c1", "add", '{"a": 1,'))
    assert result.is_error
    assert result.content.startswith("invalid tool arguments:")


async def test_arguments_that_are_not_an_object_are_an_error_result() -> None:
    result = await run_tool_call(TOOLS, ToolCall("c1", "add", "[1, 2]"))
    assert result.content == "invalid tool arguments: expected a JSON object, got list"


async def test_a_raising_tool_is_an_error_result_with_its_message() -> None:
    result = await run_tool_call(TOOLS, ToolCall("c9", "explode", "{}"))
    assert result == ToolResult(
        "c9", 'tool "explode" failed: RuntimeError: disk on fire', is_error=True
    )


async def test_wrong_argument_names_are_an_error_result() -> None:
    result = await run_tool_call(TOOLS, ToolCall("c1", "add", '{"x": 1}'))
    assert result.is_error
    assert 'tool "add" failed: TypeError' in result.content


async def test_calls_of_one_answer_run_concurrently_and_results_keep_call_order() -> None:
    first_started = asyncio.Event()
    second_started = asyncio.Event()

    async def first() -> str:
        first_started.set()
        await second_started.wait()
        return "first"

    async def second() -> str:
        second_started.set()
        await first_started.wait()
        return "second"

    tools: dict[str, Any] = {
        "first": Tool("first", "", OBJECT, first),
        "second": Tool("second", "", OBJECT, second),
    }
    calls = [ToolCall("a", "first", ""), ToolCall("b", "second", "")]
    async with asyncio.timeout(30):
        results = await run_tool_calls(tools, calls)
    assert [(r.tool_call_id, r.content) for r in results] == [("a", "first"), ("b", "second")]
