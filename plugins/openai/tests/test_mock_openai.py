"""The mock OpenAI server, exercised through the real `openai.AsyncOpenAI` client."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import openai
import pytest
from openai.types.chat import ChatCompletionChunk, ChatCompletionMessageParam

from ore_openai.testing import MockOpenAIServer, MockResponse, MockToolCall, MockUsage

HELLO: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hello"}]


@pytest.fixture
async def client(ore_mock_openai: MockOpenAIServer) -> AsyncIterator[openai.AsyncOpenAI]:
    async with openai.AsyncOpenAI(
        base_url=ore_mock_openai.base_url, api_key="test-key", max_retries=0
    ) as client:
        yield client


async def stream_chunks(client: openai.AsyncOpenAI, **extra: Any) -> list[ChatCompletionChunk]:
    stream = await client.chat.completions.create(model="m", messages=HELLO, stream=True, **extra)
    return [chunk async for chunk in stream]


def contents(chunks: list[ChatCompletionChunk]) -> list[str]:
    return [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]


def finish_reasons(chunks: list[ChatCompletionChunk]) -> list[str]:
    return [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]


async def test_text_arrives_in_several_chunks_that_join_to_the_script(
    ore_mock_openai: MockOpenAIServer, client: openai.AsyncOpenAI
) -> None:
    ore_mock_openai.script(MockResponse(text="Hello, streaming world", chunk_size=5))
    chunks = await stream_chunks(client)
    assert contents(chunks) == ["Hello", ", str", "eamin", "g wor", "ld"]
    assert finish_reasons(chunks) == ["stop"]


async def test_chunks_are_sent_as_they_are_produced_not_in_one_flush(
    ore_mock_openai: MockOpenAIServer, client: openai.AsyncOpenAI
) -> None:
    # The server sends the role chunk, "a" and "b", then holds the rest until the client
    # leaves: the client sees "a" and "b" only if each chunk went out as it was produced.
    ore_mock_openai.script(MockResponse(text="abcd", chunk_size=1, hang_after=3))
    stream = await client.chat.completions.create(model="m", messages=HELLO, stream=True)
    received: list[str] = []
    async with asyncio.timeout(30):  # bounds a hang only
        async for chunk in stream:
            received += contents([chunk])
            if len(received) == 2:
                break
    await stream.close()
    assert received == ["a", "b"]


async def test_reasoning_streams_as_reasoning_content_before_text(
    ore_mock_openai: MockOpenAIServer, client: openai.AsyncOpenAI
) -> None:
    ore_mock_openai.script(MockResponse(text="42", reasoning="let me think"))
    chunks = await stream_chunks(client)
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    reasoning = [d.model_extra["reasoning_content"] for d in deltas if d.model_extra]
    assert "".join(reasoning) == "let me think"
    assert len(reasoning) > 1
    first_text = next(i for i, d in enumerate(deltas) if d.content)
    last_reasoning = max(i for i, d in enumerate(deltas) if d.model_extra)
    assert last_reasoning < first_text


async def test_tool_calls_stream_as_fragments_and_finish_with_tool_calls(
    ore_mock_openai: MockOpenAIServer, client: openai.AsyncOpenAI
) -> None:
    ore_mock_openai.script(
        MockResponse(
            tool_calls=(
                MockToolCall("add", '{"a": 1, "b": 2}', id="call_a"),
                MockToolCall("echo", '{"text": "hi"}'),
            )
        )
    )
    chunks = await stream_chunks(client)
    fragments = [tc for c in chunks if c.choices for tc in c.choices[0].delta.tool_calls or ()]
    assert len(fragments) > 4
    calls: dict[int, dict[str, str]] = {}
    for fragment in fragments:
        call = calls.setdefault(fragment.index, {"id": "", "name": "", "arguments": ""})
        call["id"] = fragment.id or call["id"]
        assert fragment.function is not None
        call["name"] += fragment.function.name or ""
        call["arguments"] += fragment.function.arguments or ""
    assert calls[0] == {"id": "call_a", "name": "add", "arguments": '{"a": 1, "b": 2}'}
    assert calls[1]["name"] == "echo"
    assert calls[1]["arguments"] == '{"text": "hi"}'
    assert calls[1]["id"]
    assert finish_reasons(chunks) == ["tool_calls"]


async def test_scripted_finish_reason_overrides_the_default(
    ore_mock_openai: MockOpenAIServer, client: openai.AsyncOpenAI
) -> None:
    ore_mock_openai.script(MockResponse(text="cut sho", finish_reason="length"))
    assert finish_reasons(await stream_chunks(client)) == ["length"]


async def test_usage_chunk_is_sent_only_when_the_client_asks_for_it(
    ore_mock_openai: MockOpenAIServer, client: openai.AsyncOpenAI
) -> None:
    usage = MockUsage(prompt_tokens=7, completion_tokens=3)
    ore_mock_openai.script(MockResponse(text="a", usage=usage), MockResponse(text="b", usage=usage))
    with_usage = await stream_chunks(client, stream_options={"include_usage": True})
    without = await stream_chunks(client)
    assert with_usage[-1].choices == []
    assert with_usage[-1].usage is not None
    assert with_usage[-1].usage.total_tokens == 10
    assert all(c.usage is None for c in without)


async def test_every_request_body_is_recorded_in_order(
    ore_mock_openai: MockOpenAIServer, client: openai.AsyncOpenAI
) -> None:
    ore_mock_openai.script("one", "two")
    await stream_chunks(client)
    await client.chat.completions.create(
        model="other", messages=[{"role": "system", "content": "be brief"}, *HELLO]
    )
    assert [r["model"] for r in ore_mock_openai.requests] == ["m", "other"]
    assert ore_mock_openai.requests[1]["messages"][0] == {"role": "system", "content": "be brief"}
    assert ore_mock_openai.recorded[0].headers["authorization"] == "Bearer test-key"


async def test_rate_limit_error_carries_retry_after(
    ore_mock_openai: MockOpenAIServer, client: openai.AsyncOpenAI
) -> None:
    ore_mock_openai.script(MockResponse.http_error(429, "slow down", retry_after=0.25))
    with pytest.raises(openai.RateLimitError, match="slow down") as caught:
        await stream_chunks(client)
    assert caught.value.response.headers["Retry-After"] == "0.25"


async def test_server_error_is_a_500(
    ore_mock_openai: MockOpenAIServer, client: openai.AsyncOpenAI
) -> None:
    ore_mock_openai.script(MockResponse.http_error(500))
    with pytest.raises(openai.InternalServerError):
        await stream_chunks(client)


async def test_cut_stream_fails_the_reader_after_the_chunks_sent(
    ore_mock_openai: MockOpenAIServer, client: openai.AsyncOpenAI
) -> None:
    ore_mock_openai.script(MockResponse.cut("abcdefgh", after_chunks=2, chunk_size=2))
    stream = await client.chat.completions.create(model="m", messages=HELLO, stream=True)
    received: list[ChatCompletionChunk] = []

    async def read_all() -> None:
        async for chunk in stream:
            received.append(chunk)

    with pytest.raises(openai.APIConnectionError):
        await read_all()
    assert contents(received) == ["ab"]
    assert finish_reasons(received) == []


async def test_hang_sends_nothing_and_records_the_client_leaving(
    ore_mock_openai: MockOpenAIServer, client: openai.AsyncOpenAI
) -> None:
    ore_mock_openai.script(MockResponse.hang())
    task = asyncio.create_task(stream_chunks(client))
    async with asyncio.timeout(30):
        await ore_mock_openai.wait_for_requests(1)
        assert ore_mock_openai.disconnects == 0
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await ore_mock_openai.wait_for_disconnects(1)


async def test_hang_after_some_chunks_delivers_them_first(
    ore_mock_openai: MockOpenAIServer, client: openai.AsyncOpenAI
) -> None:
    ore_mock_openai.script(MockResponse.hang("abcdefgh", after_chunks=2))
    stream = await client.chat.completions.create(model="m", messages=HELLO, stream=True)
    async with asyncio.timeout(30):
        role_chunk = await stream.__anext__()
        text_chunk = await stream.__anext__()
    assert role_chunk.choices[0].delta.role == "assistant"
    assert contents([text_chunk]) == ["abcd"]
    await stream.close()
    async with asyncio.timeout(30):
        await ore_mock_openai.wait_for_disconnects(1)


async def test_abandoning_a_slow_stream_mid_way_is_recorded(
    ore_mock_openai: MockOpenAIServer, client: openai.AsyncOpenAI
) -> None:
    # It never finishes by itself: the client leaving mid-way is the only way it ends.
    ore_mock_openai.script(MockResponse.hang("x" * 40, after_chunks=3))
    stream = await client.chat.completions.create(model="m", messages=HELLO, stream=True)
    async for chunk in stream:
        if contents([chunk]):
            break
    await stream.close()
    async with asyncio.timeout(30):
        await ore_mock_openai.wait_for_disconnects(1)


async def test_completed_stream_is_not_counted_as_a_disconnect(
    ore_mock_openai: MockOpenAIServer, client: openai.AsyncOpenAI
) -> None:
    ore_mock_openai.script("done")
    await stream_chunks(client)
    await client.models.list()
    assert ore_mock_openai.disconnects == 0
    assert ore_mock_openai.errors == []


async def test_non_streaming_request_gets_a_whole_completion(
    ore_mock_openai: MockOpenAIServer, client: openai.AsyncOpenAI
) -> None:
    ore_mock_openai.script(MockResponse(text="hi", tool_calls=(MockToolCall("f", "{}", id="c1"),)))
    completion = await client.chat.completions.create(model="m", messages=HELLO)
    choice = completion.choices[0]
    assert choice.message.content == "hi"
    assert choice.finish_reason == "tool_calls"
    assert choice.message.tool_calls is not None
    assert choice.message.tool_calls[0].id == "c1"
    assert completion.usage is not None


async def test_cut_non_streaming_response_fails_the_client(
    ore_mock_openai: MockOpenAIServer, client: openai.AsyncOpenAI
) -> None:
    ore_mock_openai.script(MockResponse(text="a whole answer", cut_after=0))
    with pytest.raises(openai.APIConnectionError):
        await client.chat.completions.create(model="m", messages=HELLO)


async def test_exhausted_script_answers_500_saying_so(
    ore_mock_openai: MockOpenAIServer, client: openai.AsyncOpenAI
) -> None:
    with pytest.raises(openai.InternalServerError, match="no scripted response left"):
        await stream_chunks(client)


async def test_path_without_v1_prefix_is_served(ore_mock_openai: MockOpenAIServer) -> None:
    ore_mock_openai.script("plain")
    base_url = ore_mock_openai.base_url.removesuffix("/v1")
    async with openai.AsyncOpenAI(base_url=base_url, api_key="k", max_retries=0) as plain:
        completion = await plain.chat.completions.create(model="m", messages=HELLO)
    assert completion.choices[0].message.content == "plain"


async def test_models_endpoint_lists_the_configured_models() -> None:
    server = MockOpenAIServer(models=["llama3", "qwen"])
    async with server, openai.AsyncOpenAI(base_url=server.base_url, api_key="k") as client:
        models = await client.models.list()
    assert [m.id for m in models.data] == ["llama3", "qwen"]


async def test_get_on_chat_completions_is_method_not_allowed(
    ore_mock_openai: MockOpenAIServer,
) -> None:
    async with httpx2.AsyncClient() as http:
        response = await http.get(ore_mock_openai.base_url + "/chat/completions")
    assert response.status_code == 405


async def test_unknown_path_is_not_found(ore_mock_openai: MockOpenAIServer) -> None:
    async with httpx2.AsyncClient() as http:
        response = await http.post(ore_mock_openai.base_url + "/embeddings", json={})
    assert response.status_code == 404


def test_script_replaces_and_enqueue_appends(ore_mock_openai: MockOpenAIServer) -> None:
    ore_mock_openai.script("a", "b")
    ore_mock_openai.script("c")
    ore_mock_openai.enqueue("d", MockResponse.http_error(500))
    assert ore_mock_openai.pending == 3


def test_stop_releases_the_port_and_ends_a_hanging_response() -> None:
    import socket

    server = MockOpenAIServer([MockResponse.hang()]).start()
    port = server.port
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}")
    server.stop()
    sock.close()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    assert server.disconnects == 0


async def test_the_responder_answers_once_the_script_is_empty() -> None:
    seen: list[str] = []

    def respond(body: dict[str, Any]) -> MockResponse:
        seen.append(body["messages"][-1]["content"])
        return MockResponse(text="from the responder")

    async with (
        MockOpenAIServer(["scripted"], responder=respond) as server,
        openai.AsyncOpenAI(base_url=server.base_url, api_key="k", max_retries=0) as client,
    ):
        first = await stream_chunks(client)
        second = await stream_chunks(client)
    assert "".join(contents(first)) == "scripted"
    assert "".join(contents(second)) == "from the responder"
    assert seen == ["hello"]


async def test_stamped_chunks_carry_their_send_time(
    ore_mock_openai: MockOpenAIServer, client: openai.AsyncOpenAI
) -> None:
    before = time.monotonic()
    ore_mock_openai.script(MockResponse(text="abcdef", chunk_size=2, stamp=True))
    chunks = await stream_chunks(client)
    stamps = [float(text.rstrip(";")) for text in contents(chunks)]
    assert len(stamps) == 3
    assert stamps == sorted(stamps)
    assert before <= stamps[0] <= time.monotonic()


async def test_an_unrecorded_server_keeps_no_requests() -> None:
    async with (
        MockOpenAIServer(["a"], record=False) as server,
        openai.AsyncOpenAI(base_url=server.base_url, api_key="k", max_retries=0) as client,
    ):
        await stream_chunks(client)
        assert server.requests == []
