"""Building a model request does each turn's work once, and the SDK never re-walks it.

The request of a long thread is rebuilt for every model call (bench/request_build.py
measures it against serialising the turns). These tests count the work, not its time.
"""

from __future__ import annotations

from collections.abc import Iterator

import openai.resources.chat.completions.completions as sdk_completions
import pytest

import ore_openai.processor as processor_module
from ore_core import Manager, ModelSpec, Role, Text, Turn, UserMessageEvent
from ore_core.session.stores.memory import MemoryStore
from ore_openai.config import OpenAIConfig
from ore_openai.processor import OpenAIProcessor
from ore_openai.request import request_body
from ore_openai.testing import MockOpenAIServer

HISTORY = 200


class CountedTurns:
    """Turns that count how often they are iterated and how many items are taken."""

    def __init__(self, turns: list[Turn]) -> None:
        self.turns = turns
        self.passes = 0
        self.taken = 0

    def __iter__(self) -> Iterator[Turn]:
        self.passes += 1
        for turn in self.turns:
            self.taken += 1
            yield turn

    def __len__(self) -> int:
        return len(self.turns)

    def __getitem__(self, index: int) -> Turn:
        raise AssertionError("the request build indexes the turns instead of one pass")


def history(count: int) -> list[Turn]:
    roles = (Role.USER, Role.ASSISTANT)
    return [
        Turn(id=f"t{n}", role=roles[n % 2], artifacts=(Text(f"turn {n}"),)) for n in range(count)
    ]


def test_the_request_body_reads_the_turns_in_one_pass() -> None:
    turns = CountedTurns(history(HISTORY))
    body = request_body(OpenAIConfig(), ModelSpec(), turns)  # type: ignore[arg-type]
    assert (turns.passes, turns.taken) == (1, HISTORY)
    assert len(body["messages"]) == HISTORY


async def test_a_model_call_encodes_its_body_once_and_skips_the_sdk_transform(
    ore_mock_openai: MockOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    encoded: list[bytes] = []
    transformed: list[object] = []
    real_dumps = processor_module.dumps

    def counting_dumps(value: object) -> bytes:
        encoded.append(real_dumps(value))
        return encoded[-1]

    async def counting_transform(data: object, *args: object, **kwargs: object) -> object:
        transformed.append(data)
        return data

    monkeypatch.setattr(processor_module, "dumps", counting_dumps)
    monkeypatch.setattr(sdk_completions, "async_maybe_transform", counting_transform)
    ore_mock_openai.script("the answer")
    config = OpenAIConfig(base_url=ore_mock_openai.base_url, max_retries=0)
    async with OpenAIProcessor(config) as processor, Manager(MemoryStore(), processor) as manager:
        stream = await manager.create()
        for turn in history(HISTORY):
            await stream.append_turn(turn.role, *turn.artifacts)
        await stream.process(UserMessageEvent(content="hello"))
    assert len(encoded) == 1
    assert transformed == []
    assert len(ore_mock_openai.requests[0]["messages"]) == HISTORY + 1


async def test_the_encoded_body_is_sent_as_json(ore_mock_openai: MockOpenAIServer) -> None:
    ore_mock_openai.script("the answer")
    config = OpenAIConfig(base_url=ore_mock_openai.base_url, max_retries=0)
    async with OpenAIProcessor(config) as processor, Manager(MemoryStore(), processor) as manager:
        stream = await manager.create()
        await stream.process(UserMessageEvent(content="hello"))
    request = ore_mock_openai.recorded[0]
    assert request.headers["content-type"] == "application/json"
    assert request.body["messages"] == [{"role": "user", "content": "hello"}]
