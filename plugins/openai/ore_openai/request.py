"""The JSON body of one streaming chat completions call.

The thread's `ModelSpec` wins field by field; empty spec fields fall back to the
processor's config. Optional fields (sampling, the output limit under the name the
server wants, `reasoning_effort`) are only sent when set, so a server never sees a
null it might reject. The body is already in wire form: the processor encodes it once
and posts the bytes, so the SDK's per-field transform of `create()` (which walks every
message against its TypedDicts: 98 % of a 200-turn request's cost, bench/request_build.py)
never runs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ore_core import ModelSpec, Tool, Turn
from ore_openai.config import OpenAIConfig
from ore_openai.messages import to_messages, to_tool_params

__all__ = ["REASONING_EFFORT", "request_body"]

REASONING_EFFORT = {
    "minimal": "minimal",
    "low": "low",
    "medium": "medium",
    "high": "high",
    "max": "high",
}
"""ore thinking level -> OpenAI `reasoning_effort`; "off" sends nothing (not every
model can switch reasoning off, and non-reasoning models reject the field)."""


def request_body(
    config: OpenAIConfig,
    spec: ModelSpec,
    turns: Sequence[Turn],
    tools: Iterable[Tool] = (),
    files: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The body to POST to `/chat/completions` (streaming, usage included); `files` are
    the attachments' content parts (`ore_openai.files`)."""
    body: dict[str, Any] = {
        "model": spec.name or config.model,
        "messages": to_messages(turns, config.system_prompt, files),
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    temperature = spec.temperature if spec.temperature is not None else config.temperature
    if temperature is not None:
        body["temperature"] = temperature
    tool_params = to_tool_params(tools)
    if tool_params:
        body["tools"] = tool_params
    max_tokens = spec.max_output_tokens or config.max_output_tokens
    if max_tokens:
        body[config.max_tokens_param] = max_tokens
    effort = REASONING_EFFORT.get(spec.thinking_level)
    if effort:
        body["reasoning_effort"] = effort
    return body
