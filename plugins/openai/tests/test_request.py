"""The request body: spec over config, optional fields only when set."""

from __future__ import annotations

from ore_core import ModelSpec, Role, Text, Tool, Turn
from ore_openai.config import OpenAIConfig
from ore_openai.request import request_body

TURNS = [Turn(id="u", role=Role.USER, artifacts=[Text("hi")])]
CONFIG = OpenAIConfig(model="config-model", temperature=0.5, max_output_tokens=100)


def test_the_spec_model_and_sampling_win_over_the_config() -> None:
    spec = ModelSpec(name="spec-model", temperature=0.0, max_output_tokens=7)
    body = request_body(CONFIG, spec, TURNS)
    assert body["model"] == "spec-model"
    assert body["temperature"] == 0.0
    assert body["max_completion_tokens"] == 7


def test_an_empty_spec_uses_the_config_defaults() -> None:
    body = request_body(CONFIG, ModelSpec(), TURNS)
    assert (body["model"], body["temperature"]) == ("config-model", 0.5)
    assert body["max_completion_tokens"] == 100


def test_unset_sampling_fields_are_not_sent() -> None:
    body = request_body(OpenAIConfig(), ModelSpec(), TURNS)
    assert set(body) == {"model", "messages", "stream", "stream_options"}


def test_the_request_streams_and_asks_for_usage() -> None:
    body = request_body(OpenAIConfig(), ModelSpec(), TURNS)
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}


def test_older_servers_get_max_tokens_when_configured() -> None:
    config = OpenAIConfig(max_output_tokens=64, max_tokens_param="max_tokens")
    body = request_body(config, ModelSpec(), TURNS)
    assert body["max_tokens"] == 64
    assert "max_completion_tokens" not in body


def test_thinking_level_becomes_reasoning_effort_and_off_sends_nothing() -> None:
    high = request_body(OpenAIConfig(), ModelSpec(name="o", thinking_level="max"), TURNS)
    off = request_body(OpenAIConfig(), ModelSpec(name="o", thinking_level="off"), TURNS)
    assert high["reasoning_effort"] == "high"
    assert "reasoning_effort" not in off


def test_tools_are_declared_only_when_there_are_some() -> None:
    async def ping() -> str:
        return "pong"

    tool = Tool("ping", "Replies pong", {"type": "object"}, ping)
    assert (
        request_body(OpenAIConfig(), ModelSpec(), TURNS, [tool])["tools"][0]["function"]["name"]
        == "ping"
    )
