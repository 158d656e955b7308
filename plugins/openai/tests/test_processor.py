"""OpenAIProcessor end to end: real Manager, real MemoryStore, real HTTP to the mock server."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from ore_core import (
    ArtifactEvent,
    ErrorEvent,
    EventContext,
    LifecycleEvent,
    Manager,
    NoticeEvent,
    OutputEvent,
    Role,
    Severity,
    StopReason,
    Stream,
    Text,
    Tool,
    ToolResult,
    TurnCancelled,
    TurnFailed,
    Usage,
    UserMessageEvent,
)
from ore_core.session.fanout import Subscription
from ore_core.session.spec import KEY_MODEL_NAME
from ore_core.session.stores.memory import MemoryStore
from ore_openai.config import OpenAIConfig
from ore_openai.processor import ITERATION_CAP_RESULT, OpenAIProcessor
from ore_openai.testing import MockOpenAIServer, MockResponse, MockToolCall, MockUsage

SYSTEM_PROMPT = "You are a calculator."


async def add(a: int, b: int) -> int:
    return a + b


ADD = Tool("add", "Adds two integers", {"type": "object", "properties": {}}, add)


def config_for(server: MockOpenAIServer, **overrides: Any) -> OpenAIConfig:
    values: dict[str, Any] = {
        "base_url": server.base_url,
        "model": "config-model",
        "max_retries": 2,
        "retry_backoff": 0.0,
        "timeout": 5.0,
        **overrides,
    }
    return OpenAIConfig(**values)


@asynccontextmanager
async def conversation(
    server: MockOpenAIServer,
    tools: list[Tool] | None = None,
    metadata: dict[str, str] | None = None,
    **overrides: Any,
) -> AsyncIterator[Stream]:
    processor = OpenAIProcessor(config_for(server, **overrides), tools or [])
    async with processor, Manager(MemoryStore(), processor) as manager:
        yield await manager.create(metadata)


def drain(subscription: Subscription) -> list[OutputEvent]:
    """Everything published so far (the stream publishes synchronously)."""
    events = []
    while (event := subscription.get_nowait()) is not None:
        events.append(event)
    return events


async def ask(stream: Stream, text: str) -> list[OutputEvent]:
    """Send a user message, wait until it is handled, return its events."""
    async with stream.subscribe() as subscription:
        async with asyncio.timeout(10):
            await stream.process(message(text))
        return drain(subscription)


def message(text: str) -> UserMessageEvent:
    return UserMessageEvent(content=text, context=EventContext(provenance="test"))


def system_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in body["messages"] if m["role"] == "system"]


async def test_a_text_answer_streams_deltas_and_records_text_stop_reason_and_usage(
    ore_mock_openai: MockOpenAIServer,
) -> None:
    usage = MockUsage(prompt_tokens=9, completion_tokens=4)
    ore_mock_openai.script(MockResponse(text="Hello there, human", usage=usage))
    async with conversation(ore_mock_openai) as stream:
        events = await ask(stream, "hi")
    deltas = [e for e in events if e.kind == "text_delta"]
    assert len(deltas) > 1
    answer = stream.turns()[-1]
    assert answer.role == Role.ASSISTANT
    assert answer.artifacts == (
        Text("Hello there, human"),
        StopReason("stop"),
        Usage(prompt_tokens=9, completion_tokens=4, total_tokens=13),
    )


async def test_the_whole_conversation_is_sent_and_reasoning_is_not(
    ore_mock_openai: MockOpenAIServer,
) -> None:
    ore_mock_openai.script(MockResponse(text="4", reasoning="2+2 is 4"), "8")
    async with conversation(ore_mock_openai) as stream:
        await ask(stream, "2+2?")
        await ask(stream, "times 2?")
    assert ore_mock_openai.requests[1]["messages"] == [
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "4"},
        {"role": "user", "content": "times 2?"},
    ]


async def test_the_thread_model_spec_overrides_the_configured_model(
    ore_mock_openai: MockOpenAIServer,
) -> None:
    ore_mock_openai.script("from the spec model")
    async with conversation(ore_mock_openai, metadata={KEY_MODEL_NAME: "spec-model"}) as stream:
        await ask(stream, "hi")
    assert ore_mock_openai.requests[0]["model"] == "spec-model"


async def test_without_a_spec_the_configured_model_is_used(
    ore_mock_openai: MockOpenAIServer,
) -> None:
    ore_mock_openai.script("ok")
    async with conversation(ore_mock_openai) as stream:
        await ask(stream, "hi")
    assert ore_mock_openai.requests[0]["model"] == "config-model"


async def test_a_rate_limit_is_retried_after_a_notice_and_then_answered(
    ore_mock_openai: MockOpenAIServer,
) -> None:
    ore_mock_openai.script(MockResponse.http_error(429, "slow down", retry_after=0.01), "finally")
    async with conversation(ore_mock_openai) as stream:
        events = await ask(stream, "hi")
    assert len(ore_mock_openai.requests) == 2
    notices = [e for e in events if isinstance(e, NoticeEvent)]
    assert len(notices) == 1
    assert notices[0].severity == Severity.WARN
    assert "HTTP 429 slow down; retrying" in notices[0].content
    assert stream.turns()[-1].artifacts[0] == Text("finally")


async def test_retry_after_is_honoured_before_the_next_attempt(
    ore_mock_openai: MockOpenAIServer,
) -> None:
    ore_mock_openai.script(MockResponse.http_error(429, retry_after=0.3), "ok")
    async with conversation(ore_mock_openai) as stream:
        await ask(stream, "hi")
    first, second = ore_mock_openai.recorded
    assert second.received_at - first.received_at >= 0.3


async def test_server_errors_that_outlast_the_retries_fail_the_turn_clearly(
    ore_mock_openai: MockOpenAIServer,
) -> None:
    ore_mock_openai.script(*[MockResponse.http_error(500, "overloaded")] * 3)
    async with conversation(ore_mock_openai, max_retries=2) as stream:
        async with stream.subscribe() as subscription:
            with pytest.raises(TurnFailed) as failed:
                await stream.process(message("hi"))
        errors = [e for e in drain(subscription) if isinstance(e, ErrorEvent)]
    assert len(ore_mock_openai.requests) == 3
    text = str(failed.value)
    assert "openai model 'config-model' at http://127.0.0.1" in text
    assert "HTTP 500 overloaded after 3 attempts" in text
    assert [e.message for e in errors] == [text]
    assert [t.role for t in stream.turns()] == [Role.USER]


async def test_a_client_error_is_not_retried(ore_mock_openai: MockOpenAIServer) -> None:
    ore_mock_openai.script(MockResponse.http_error(401, "bad key"))
    async with conversation(ore_mock_openai) as stream:
        with pytest.raises(TurnFailed, match="HTTP 401 bad key; check api_key"):
            await stream.process(message("hi"))
    assert len(ore_mock_openai.requests) == 1


async def test_an_unreachable_server_fails_after_the_retries_naming_base_url() -> None:
    with MockOpenAIServer() as gone:
        base_url = gone.base_url  # the port is closed once the server stops
    config = OpenAIConfig(base_url=base_url, max_retries=1, retry_backoff=0.0)
    async with OpenAIProcessor(config) as processor, Manager(MemoryStore(), processor) as manager:
        stream = await manager.create()
        with pytest.raises(
            TurnFailed, match=r"connection failed .* after 2 attempts; check base_url"
        ):
            await stream.process(message("hi"))


async def test_a_stream_cut_mid_way_fails_the_turn_and_records_nothing(
    ore_mock_openai: MockOpenAIServer,
) -> None:
    ore_mock_openai.script(MockResponse.cut("a long answer that never ends", after_chunks=3))
    async with conversation(ore_mock_openai) as stream, stream.subscribe() as subscription:
        with pytest.raises(TurnFailed, match="broke off"):
            await stream.process(message("hi"))
        events = drain(subscription)
    assert any(e.kind == "text_delta" for e in events)
    assert [t.role for t in stream.turns()] == [Role.USER]
    assert len(ore_mock_openai.requests) == 1


async def test_three_tool_round_trips_send_exactly_one_system_message_per_call(
    ore_mock_openai: MockOpenAIServer,
) -> None:
    ore_mock_openai.script(
        MockResponse(tool_calls=(MockToolCall("add", '{"a": 1, "b": 2}'),)),
        MockResponse(tool_calls=(MockToolCall("add", '{"a": 3, "b": 4}'),)),
        MockResponse(tool_calls=(MockToolCall("add", '{"a": 7, "b": 8}'),)),
        "The sums are 3, 7 and 15.",
    )
    async with conversation(ore_mock_openai, [ADD], system_prompt=SYSTEM_PROMPT) as stream:
        await ask(stream, "add some numbers")
    assert len(ore_mock_openai.requests) == 4
    for body in ore_mock_openai.requests:
        assert system_messages(body) == [{"role": "system", "content": SYSTEM_PROMPT}]
        assert body["messages"][0]["role"] == "system"
    roles = [t.role for t in stream.turns()]
    assert roles == [Role.USER] + [Role.ASSISTANT, Role.TOOL] * 3 + [Role.ASSISTANT]
    assert all(t.role != Role.SYSTEM for t in stream.turns())


async def test_tool_results_are_sent_back_to_the_model(ore_mock_openai: MockOpenAIServer) -> None:
    ore_mock_openai.script(
        MockResponse(tool_calls=(MockToolCall("add", '{"a": 2, "b": 2}', id="c1"),)), "4"
    )
    async with conversation(ore_mock_openai, [ADD]) as stream:
        await ask(stream, "2+2")
    tool_turn = stream.turns()[2]
    assert tool_turn.artifacts == (ToolResult("c1", "4", value=4),)
    assert ore_mock_openai.requests[1]["messages"][-1] == {
        "role": "tool",
        "tool_call_id": "c1",
        "content": "4",
    }
    assert ore_mock_openai.requests[0]["tools"][0]["function"]["name"] == "add"


async def test_an_unknown_tool_is_answered_with_an_error_result(
    ore_mock_openai: MockOpenAIServer,
) -> None:
    ore_mock_openai.script(MockResponse(tool_calls=(MockToolCall("rm", "{}", id="c1"),)), "sorry")
    async with conversation(ore_mock_openai, [ADD]) as stream:
        await ask(stream, "clean up")
    (result,) = stream.turns()[2].artifacts
    assert isinstance(result, ToolResult)
    assert result.is_error
    assert result.content == 'tool "rm" not found (available tools: add)'
    assert stream.turns()[-1].artifacts[0] == Text("sorry")


async def test_the_iteration_cap_stops_the_loop_with_a_warning_and_answered_calls(
    ore_mock_openai: MockOpenAIServer,
) -> None:
    ore_mock_openai.script(
        *[MockResponse(tool_calls=(MockToolCall("add", '{"a": 1, "b": 1}'),))] * 3
    )
    async with conversation(ore_mock_openai, [ADD], max_iterations=2) as stream:
        events = await ask(stream, "loop forever")
    assert len(ore_mock_openai.requests) == 2
    assert ore_mock_openai.pending == 1
    roles = [t.role for t in stream.turns()]
    assert roles == [Role.USER, Role.ASSISTANT, Role.TOOL, Role.ASSISTANT, Role.TOOL]
    (capped,) = stream.turns()[-1].artifacts
    assert isinstance(capped, ToolResult)
    assert (capped.is_error, capped.content) == (True, ITERATION_CAP_RESULT)
    warnings = [e for e in events if isinstance(e, NoticeEvent) and e.severity == Severity.WARN]
    assert len(warnings) == 1
    assert "max_iterations" in warnings[0].content


async def test_cancelling_a_turn_waiting_for_the_model_closes_the_connection(
    ore_mock_openai: MockOpenAIServer,
) -> None:
    ore_mock_openai.script(MockResponse.hang())
    async with conversation(ore_mock_openai) as stream:
        turn = asyncio.create_task(stream.process(message("hi")))
        async with asyncio.timeout(30):
            await ore_mock_openai.wait_for_requests(1)
        stream.cancel()
        with pytest.raises(TurnCancelled):
            await turn
        async with asyncio.timeout(30):
            await ore_mock_openai.wait_for_disconnects(1)
    assert [t.role for t in stream.turns()] == [Role.USER]


async def test_cancelling_mid_stream_closes_the_connection_and_records_nothing(
    ore_mock_openai: MockOpenAIServer,
) -> None:
    # The answer never finishes by itself, however slow the test runs: only the cancel ends it.
    ore_mock_openai.script(MockResponse.hang("x" * 200, after_chunks=3))
    async with conversation(ore_mock_openai) as stream:
        async with stream.subscribe("text_delta", "lifecycle") as subscription:
            turn = asyncio.create_task(stream.process(message("hi")))
            async with asyncio.timeout(30):
                async for event in subscription:
                    if isinstance(event, ArtifactEvent):
                        break
            stream.cancel()
            with pytest.raises(TurnCancelled):
                await turn
            phases = [e.phase for e in drain(subscription) if isinstance(e, LifecycleEvent)]
        async with asyncio.timeout(30):
            await ore_mock_openai.wait_for_disconnects(1)
    assert "cancelled" in phases
    assert [t.role for t in stream.turns()] == [Role.USER]
