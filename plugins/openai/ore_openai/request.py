"""The keyword arguments of one streaming chat completions call.

The thread's `ModelSpec` wins field by field; empty spec fields fall back to the
processor's config. Fields that some servers or SDK versions lack (the output
limit's name, `reasoning_effort`) travel in `extra_body` and are only sent when set,
so a server never sees a null it might reject.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from ore_core import ModelSpec, Tool, Turn
from ore_openai.config import OpenAIConfig
from ore_openai.messages import to_messages, to_tool_params

__all__ = ["REASONING_EFFORT", "request_kwargs"]

REASONING_EFFORT = {
    "minimal": "minimal",
    "low": "low",
    "medium": "medium",
    "high": "high",
    "max": "high",
}
"""ore thinking level -> OpenAI `reasoning_effort`; "off" sends nothing (not every
model can switch reasoning off, and non-reasoning models reject the field)."""


def request_kwargs(
    config: OpenAIConfig, spec: ModelSpec, turns: Sequence[Turn], tools: Iterable[Tool] = ()
) -> dict[str, Any]:
    """Arguments for `client.chat.completions.create` (streaming, usage included)."""
    kwargs: dict[str, Any] = {
        "model": spec.name or config.model,
        "messages": to_messages(turns, config.system_prompt),
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    temperature = spec.temperature if spec.temperature is not None else config.temperature
    if temperature is not None:
        kwargs["temperature"] = temperature
    tool_params = to_tool_params(tools)
    if tool_params:
        kwargs["tools"] = tool_params
    extra: dict[str, Any] = {}
    max_tokens = spec.max_output_tokens or config.max_output_tokens
    if max_tokens:
        extra[config.max_tokens_param] = max_tokens
    effort = REASONING_EFFORT.get(spec.thinking_level)
    if effort:
        extra["reasoning_effort"] = effort
    if extra:
        kwargs["extra_body"] = extra
    return kwargs
