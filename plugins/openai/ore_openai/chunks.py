"""Streamed chat completion chunks -> ore artifacts.

Deltas come out as they arrive (`TextDelta`, `ReasoningDelta`, `ToolCallDelta`);
the `StopReason` and then the `Usage` come after the last chunk, so they follow every
delta whatever order the server sent them in. A stream that ends without a finish
reason was cut off: that raises instead of passing for a complete answer.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterable, AsyncIterator, Iterator
from typing import TYPE_CHECKING

from ore_core import Artifact, ReasoningDelta, StopReason, TextDelta, ToolCallDelta, Usage
from ore_core.artifacts import StopReasonValue
from ore_openai.errors import ModelCallFailed

if TYPE_CHECKING:
    from openai.types import CompletionUsage
    from openai.types.chat import ChatCompletionChunk
    from openai.types.chat.chat_completion_chunk import ChoiceDelta

__all__ = ["REASONING_FIELDS", "chunk_artifacts", "stop_reason", "usage_artifact"]

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


def usage_artifact(usage: CompletionUsage) -> Usage:
    """ore's `Usage` from the API's; cached and reasoning tokens when reported."""
    prompt_details = usage.prompt_tokens_details
    completion_details = usage.completion_tokens_details
    cached = prompt_details.cached_tokens if prompt_details is not None else None
    thinking = completion_details.reasoning_tokens if completion_details is not None else None
    return Usage(
        prompt_tokens=usage.prompt_tokens,
        completion_tokens=usage.completion_tokens,
        total_tokens=usage.total_tokens,
        cache_read_tokens=cached or 0,
        thinking_tokens=thinking,
    )


def _reasoning_of(delta: ChoiceDelta) -> str:
    extra = delta.model_extra or {}
    for name in REASONING_FIELDS:
        value = extra.get(name)
        if isinstance(value, str) and value:
            return value
    return ""


async def chunk_artifacts(chunks: AsyncIterable[ChatCompletionChunk]) -> AsyncIterator[Artifact]:
    """Every artifact of one streamed answer (only the first choice is used)."""
    finish: str | None = None
    usage: Usage | None = None
    seen_calls: set[int] = set()
    async for chunk in chunks:
        if chunk.usage is not None:
            usage = usage_artifact(chunk.usage)
        for choice in chunk.choices:
            if choice.index != 0:
                continue
            for artifact in _delta_artifacts(choice.delta, seen_calls):
                yield artifact
            if choice.finish_reason:
                finish = choice.finish_reason
    if finish is None:
        raise ModelCallFailed("the stream ended without a finish reason")
    yield stop_reason(finish)
    if usage is not None:
        yield usage


def _delta_artifacts(delta: ChoiceDelta, seen_calls: set[int]) -> Iterator[Artifact]:
    reasoning = _reasoning_of(delta)
    if reasoning:
        yield ReasoningDelta(reasoning)
    if delta.content:
        yield TextDelta(delta.content)
    if delta.refusal:
        yield TextDelta(delta.refusal)
    for call in delta.tool_calls or ():
        call_id = call.id or ""
        if call.index not in seen_calls:
            seen_calls.add(call.index)
            # Some servers omit ids; results are paired with calls by id, so make one.
            call_id = call_id or f"call_{secrets.token_hex(6)}"
        function = call.function
        yield ToolCallDelta(
            index=call.index,
            id=call_id,
            name=(function.name or "") if function else "",
            arguments=(function.arguments or "") if function else "",
        )
