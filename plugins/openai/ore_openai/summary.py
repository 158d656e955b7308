"""What compaction asks of the OpenAI processor: the model's context window, a summary.

`CONTEXT_WINDOWS` holds the windows of well-known models (by name prefix, longest
first wins); others get `compaction.context_window` or 128,000 tokens. The summary is
one more streamed call with the turns being replaced and the summary prompt, no tools.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Sequence
from typing import TYPE_CHECKING, cast

from ore_core import ModelSpec, Role, StopReason, Text, TextDelta, Turn
from ore_core.jsonutil import dumps
from ore_core.session.compactor import DEFAULT_CONTEXT_WINDOW
from ore_openai.chunks import Chunk, chunk_artifacts
from ore_openai.errors import ModelCallFailed
from ore_openai.request import request_body

if TYPE_CHECKING:
    from ore_openai.processor import OpenAIProcessor

__all__ = ["CONTEXT_WINDOWS", "context_window", "summarise"]

CONTEXT_WINDOWS = {
    "gpt-4.1": 1_047_576,
    "gpt-4o": 128_000,
    "gpt-4-turbo": 128_000,
    "gpt-4": 8_192,
    "gpt-3.5-turbo": 16_385,
    "gpt-5": 400_000,
    "o1": 200_000,
    "o3": 200_000,
    "o4-mini": 200_000,
}
"""Context windows in tokens by model name prefix (the providers' published figures)."""


def context_window(model: str) -> int:
    """The window of `model`: the longest matching prefix in `CONTEXT_WINDOWS`."""
    matches = [prefix for prefix in CONTEXT_WINDOWS if model.startswith(prefix)]
    return CONTEXT_WINDOWS[max(matches, key=len)] if matches else DEFAULT_CONTEXT_WINDOW


async def summarise(
    processor: OpenAIProcessor, turns: Sequence[Turn], prompt: str, model: str
) -> str:
    """The model's summary of `turns`; ModelCallFailed when the call fails or is cut short."""
    asked = [*turns, Turn("ore-summary-request", Role.USER, (Text(prompt),))]
    body = request_body(processor.config, ModelSpec(name=model), asked)
    stream = await processor.post(dumps(body))
    parts: list[str] = []
    try:
        async for artifact in chunk_artifacts(cast(AsyncIterable[Chunk], stream)):
            if isinstance(artifact, TextDelta):
                parts.append(artifact.content)
            elif isinstance(artifact, StopReason) and artifact.reason == "length":
                raise ModelCallFailed("the summary was cut off at the output limit")
    finally:
        await stream.close()
    return "".join(parts)
