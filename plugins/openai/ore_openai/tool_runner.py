"""Runs a model's tool calls and turns each outcome into a `ToolResult`.

Every call gets exactly one result, in call order, so the next request pairs them:
an unknown tool, arguments that are not a JSON object, and a tool that raises all
become error results the model can read and react to. Calls of one answer run
concurrently; cancelling the turn cancels them all.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from ore_core import Tool, ToolCall, ToolResult
from ore_core.jsonutil import dumps, loads

__all__ = ["run_tool_call", "run_tool_calls"]


async def run_tool_calls(tools: Mapping[str, Tool], calls: Sequence[ToolCall]) -> list[ToolResult]:
    """One result per call, in the order of `calls`."""
    async with asyncio.TaskGroup() as group:
        tasks = [group.create_task(run_tool_call(tools, call)) for call in calls]
    return [task.result() for task in tasks]


async def run_tool_call(tools: Mapping[str, Tool], call: ToolCall) -> ToolResult:
    """Run one call; failures come back as `is_error` results, never as exceptions."""
    tool = tools.get(call.name)
    if tool is None:
        known = ", ".join(sorted(tools)) or "none"
        return _error(call, f'tool "{call.name}" not found (available tools: {known})')
    try:
        arguments = loads(call.arguments) if call.arguments.strip() else {}
    except ValueError as exc:
        return _error(call, f"invalid tool arguments: {exc}")
    if not isinstance(arguments, dict):
        kind = type(arguments).__name__
        return _error(call, f"invalid tool arguments: expected a JSON object, got {kind}")
    try:
        value = await tool.call(arguments)
    except Exception as exc:
        return _error(call, f'tool "{call.name}" failed: {type(exc).__name__}: {exc}')
    if isinstance(value, str):
        return ToolResult(call.id, content=value)
    return ToolResult(call.id, content=_as_text(value), value=value)


def _error(call: ToolCall, message: str) -> ToolResult:
    return ToolResult(call.id, content=message, is_error=True)


def _as_text(value: Any) -> str:
    try:
        return dumps(value).decode()
    except TypeError:
        return str(value)
