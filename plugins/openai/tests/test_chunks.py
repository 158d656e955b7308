"""Streamed chunks -> artifacts, from the mock server through the processor's HTTP call."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from ore_core import (
    Artifact,
    ModelSpec,
    ReasoningDelta,
    Role,
    StopReason,
    Text,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    Turn,
    Usage,
)
from ore_core.jsonutil import dumps
from ore_openai.chunks import Chunk, chunk_artifacts, stop_reason
from ore_openai.config import OpenAIConfig
from ore_openai.errors import ModelCallFailed
from ore_openai.processor import OpenAIProcessor
from ore_openai.request import request_body
from ore_openai.testing import MockOpenAIServer, MockResponse, MockToolCall, MockUsage


async def served(server: MockOpenAIServer, response: MockResponse) -> list[Artifact]:
    server.script(response)
    config = OpenAIConfig(base_url=server.base_url, max_retries=0)
    turns = [Turn(id="u", role=Role.USER, artifacts=(Text("hi"),))]
    async with OpenAIProcessor(config) as processor:
        stream = await processor.post(dumps(request_body(config, ModelSpec(), turns)))
        return [artifact async for artifact in chunk_artifacts(stream)]  # type: ignore[arg-type]


async def from_dicts(*chunks: dict[str, Any]) -> list[Artifact]:
    header = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m"}

    async def source() -> AsyncIterator[Chunk]:
        for chunk in chunks:
            yield {**header, **chunk}

    return [artifact async for artifact in chunk_artifacts(source())]


def delta(finish: str | None = None, **fields: Any) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": fields, "finish_reason": finish}]}


def merged_tool_calls(artifacts: list[Artifact]) -> list[ToolCall]:
    calls: dict[str, Artifact | None] = {}
    for artifact in artifacts:
        if isinstance(artifact, ToolCallDelta):
            key = artifact.accumulator_key()
            calls[key] = artifact.merge_into(calls.get(key))
    return [call for call in calls.values() if isinstance(call, ToolCall)]


async def test_text_streams_as_several_deltas_then_stop_reason_then_usage(
    ore_mock_openai: MockOpenAIServer,
) -> None:
    usage = MockUsage(prompt_tokens=5, completion_tokens=3)
    artifacts = await served(ore_mock_openai, MockResponse(text="Hello world", usage=usage))
    texts = [a for a in artifacts if isinstance(a, TextDelta)]
    assert len(texts) > 1
    assert "".join(t.content for t in texts) == "Hello world"
    assert artifacts[-2:] == [
        StopReason("stop"),
        Usage(prompt_tokens=5, completion_tokens=3, total_tokens=8),
    ]


async def test_reasoning_content_becomes_reasoning_deltas(
    ore_mock_openai: MockOpenAIServer,
) -> None:
    artifacts = await served(ore_mock_openai, MockResponse(text="4", reasoning="two and two"))
    reasoning = [a.content for a in artifacts if isinstance(a, ReasoningDelta)]
    assert "".join(reasoning) == "two and two"


async def test_reasoning_field_used_by_ollama_becomes_reasoning_deltas() -> None:
    artifacts = await from_dicts(delta(reasoning="hmm"), delta("stop"))
    assert artifacts[0] == ReasoningDelta("hmm")


async def test_tool_call_fragments_merge_into_complete_calls(
    ore_mock_openai: MockOpenAIServer,
) -> None:
    response = MockResponse(
        tool_calls=(MockToolCall("add", '{"a": 1, "b": 2}', id="c1"), MockToolCall("now"))
    )
    artifacts = await served(ore_mock_openai, response)
    assert sum(isinstance(a, ToolCallDelta) for a in artifacts) > 2
    calls = merged_tool_calls(artifacts)
    assert calls[0] == ToolCall("c1", "add", '{"a": 1, "b": 2}')
    assert calls[1].name == "now"
    assert StopReason("tool_use") in artifacts


async def test_a_tool_call_without_id_gets_one_that_later_fragments_keep() -> None:
    first = {"index": 0, "function": {"name": "f", "arguments": '{"x"'}}
    second = {"index": 0, "function": {"arguments": ": 1}"}}
    artifacts = await from_dicts(
        delta(tool_calls=[first]), delta(tool_calls=[second]), delta("tool_calls")
    )
    (call,) = merged_tool_calls(artifacts)
    assert call.id.startswith("call_")
    assert call.arguments == '{"x": 1}'


async def test_refusal_text_is_shown_as_text() -> None:
    artifacts = await from_dicts(delta(refusal="I can't help with that"), delta("content_filter"))
    assert artifacts == [TextDelta("I can't help with that"), StopReason("refusal")]


async def test_usage_reports_cached_and_reasoning_tokens() -> None:
    usage = {
        "prompt_tokens": 10,
        "completion_tokens": 6,
        "total_tokens": 16,
        "prompt_tokens_details": {"cached_tokens": 4},
        "completion_tokens_details": {"reasoning_tokens": 2},
    }
    artifacts = await from_dicts(delta("stop"), {"choices": [], "usage": usage})
    assert artifacts[-1] == Usage(
        prompt_tokens=10,
        completion_tokens=6,
        total_tokens=16,
        cache_read_tokens=4,
        thinking_tokens=2,
    )


async def test_stop_reason_and_usage_follow_every_delta_even_if_sent_together() -> None:
    usage = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
    finish = delta("stop", content="!")
    artifacts = await from_dicts(delta(content="hi"), {**finish, "usage": usage})
    assert [a.kind for a in artifacts] == ["text_delta", "text_delta", "stop_reason", "usage"]


async def test_a_stream_without_finish_reason_is_a_failure() -> None:
    with pytest.raises(ModelCallFailed, match="without a finish reason"):
        await from_dicts(delta(content="half an ans"))


@pytest.mark.parametrize(
    ("finish", "reason"),
    [
        ("stop", "stop"),
        ("length", "length"),
        ("tool_calls", "tool_use"),
        ("function_call", "tool_use"),
        ("content_filter", "refusal"),
        ("eos_token", "other"),
    ],
)
def test_finish_reasons_map_to_ore_stop_reasons(finish: str, reason: str) -> None:
    assert stop_reason(finish).reason == reason
