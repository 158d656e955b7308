"""Streamed chat completion chunks (their JSON, as decoded) -> ore artifacts.

Deltas come out as they arrive (`TextDelta`, `ReasoningDelta`, `ToolCallDelta`);
the `StopReason` and then the `Usage` come after the last chunk, so they follow every
delta whatever order the server sent them in. A stream that ends without a finish
reason was cut off: that raises instead of passing for a complete answer.

Chunks are read as the plain JSON objects the SDK decoded (`AsyncStream[object]`),
not built into `ChatCompletionChunk` models: building one per chunk was the largest
part of the core's CPU per streamed answer (bench/model_path.py --profile).
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterable, AsyncIterator, Iterator, Mapping
from typing import Any

from ore_core import Artifact, ReasoningDelta, StopReason, TextDelta, ToolCallDelta, Usage
from ore_core.artifacts import StopReasonValue
from ore_openai.errors import ModelCallFailed

__all__ = ["REASONING_FIELDS", "Chunk", "chunk_artifacts", "stop_reason", "usage_artifact"]

Chunk = Mapping[str, Any]
"""One `chat.completion.chunk` object as decoded from the stream's JSON."""

_STOP_REASONS: dict[str, StopReasonValue] = {
    "stop": "stop",
    "length": "length",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "refusal",
}

REASONING_FIELDS = ("reasoning_content", "reasoning")
"""Where OpenAI-compatible servers put reasoning text (DeepSeek/vLLM, Ollama/OpenRouter)."""


def stop_reason(finish_reason: str) -> StopReason:
    """ore's stop reason for an OpenAI `finish_reason`; unknown ones are `other`."""
    return StopReason(_STOP_REASONS.get(finish_reason, "other"))


def usage_artifact(usage: Mapping[str, Any]) -> Usage:
    """ore's `Usage` from the API's `usage` object; cached and reasoning tokens when reported."""
    prompt_details = usage.get("prompt_tokens_details") or {}
    completion_details = usage.get("completion_tokens_details") or {}
    return Usage(
        prompt_tokens=usage.get("prompt_tokens") or 0,
        completion_tokens=usage.get("completion_tokens") or 0,
        total_tokens=usage.get("total_tokens") or 0,
        cache_read_tokens=prompt_details.get("cached_tokens") or 0,
        thinking_tokens=completion_details.get("reasoning_tokens"),
    )


def _reasoning_of(delta: Mapping[str, Any]) -> str:
    for name in REASONING_FIELDS:
        value = delta.get(name)
        if isinstance(value, str) and value:
            return value
    return ""


async def chunk_artifacts(chunks: AsyncIterable[Chunk]) -> AsyncIterator[Artifact]:
    """Every artifact of one streamed answer (only the first choice is used)."""
    finish: str | None = None
    usage: Usage | None = None
    seen_calls: set[int] = set()
    async for chunk in chunks:
        if chunk.get("usage"):
            usage = usage_artifact(chunk["usage"])
        for choice in chunk.get("choices") or ():
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta")
            if delta:
                for artifact in _delta_artifacts(delta, seen_calls):
                    yield artifact
            if choice.get("finish_reason"):
                finish = choice["finish_reason"]
    if finish is None:
        raise ModelCallFailed("the stream ended without a finish reason")
    yield stop_reason(finish)
    if usage is not None:
        yield usage


def _delta_artifacts(delta: Mapping[str, Any], seen_calls: set[int]) -> Iterator[Artifact]:
    reasoning = _reasoning_of(delta)
    if reasoning:
        yield ReasoningDelta(reasoning)
    content = delta.get("content")
    if content:
        yield TextDelta(content)
    refusal = delta.get("refusal")
    if refusal:
        yield TextDelta(refusal)
    for call in delta.get("tool_calls") or ():
        index = call.get("index", 0)
        call_id = call.get("id") or ""
        if index not in seen_calls:
            seen_calls.add(index)
            # Some servers omit ids; results are paired with calls by id, so make one.
            call_id = call_id or f"call_{secrets.token_hex(6)}"
        function = call.get("function") or {}
        yield ToolCallDelta(
            index=index,
            id=call_id,
            name=function.get("name") or "",
            arguments=function.get("arguments") or "",
        )
