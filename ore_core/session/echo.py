"""The echo turn processor: streams the user's text back. The offline default.

Useful to try conduits and the bus without a model, and as the fastest processor
for benchmarks: it exercises the whole message path (deltas, accumulation,
lifecycle, persistence) with no model latency.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Mapping
from typing import Any

from ore_core.artifacts import Artifact, TextDelta
from ore_core.session.turn_context import TurnContext

__all__ = ["EchoProcessor", "echo_factory"]

_WORDS = re.compile(r"\S+\s*|\s+")


class EchoProcessor:
    """Replies with the user's message, one delta per word (`prefix` is prepended).

    `delay` seconds pass before the answer starts: a stand-in for a model's latency
    when trying out crashes, failover and load without a model.
    """

    default_model: None = None
    """Echo has no model: `/model` says so instead of pretending to switch."""

    def describe(self) -> str:
        """What answers, for `ore serve`, `ore chat` and `/model`."""
        return "echo (it repeats your message; no model)"

    def __init__(self, prefix: str = "", delay: float = 0.0) -> None:
        self.prefix = prefix
        self.delay = delay

    async def __call__(self, ctx: TurnContext) -> None:
        if self.delay > 0:
            await asyncio.sleep(self.delay)
        await ctx.step(self._deltas(self.prefix + ctx.event.content))

    @staticmethod
    async def _deltas(text: str) -> AsyncIterator[Artifact]:
        for match in _WORDS.finditer(text):
            yield TextDelta(match.group())


def echo_factory(config: Mapping[str, Any]) -> EchoProcessor:
    """Build the echo processor from its config section (`prefix`, `delay`, both optional)."""
    return EchoProcessor(
        prefix=str(config.get("prefix", "")), delay=float(config.get("delay", 0.0))
    )
