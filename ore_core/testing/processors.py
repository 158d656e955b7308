"""Turn processors for tests: scripted replies, a gate to hold a turn open, failures.

They are real `TurnProcessor`s driving the real `TurnContext`, so tests that use
them exercise the same event sequence a model-backed processor produces.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable, Sequence

from ore_core.artifacts import Artifact, Text, TextDelta
from ore_core.session.spec import ModelSpec
from ore_core.session.turn_context import TurnContext

__all__ = ["GatedProcessor", "ScriptedProcessor", "SlowEcho"]

Reply = str | Sequence[Artifact] | BaseException


class ScriptedProcessor:
    """Answers each turn with the next scripted reply.

    A reply is a string (streamed as one delta per character group), a list of
    artifacts (streamed as given), or an exception (raised from the model stream).
    When the script runs out, the last reply repeats. Records what it saw.
    """

    def __init__(self, replies: Iterable[Reply] = ("ok",), *, chunk: int = 4) -> None:
        self.replies: list[Reply] = list(replies)
        self.chunk = chunk
        self.calls = 0
        self.seen_specs: list[ModelSpec] = []
        self.seen_turns: list[int] = []

    async def __call__(self, ctx: TurnContext) -> None:
        reply = self.replies[min(self.calls, len(self.replies) - 1)]
        self.calls += 1
        self.seen_specs.append(ctx.spec)
        self.seen_turns.append(len(ctx.turns()))
        await ctx.step(self._artifacts(reply))

    async def _artifacts(self, reply: Reply) -> AsyncIterator[Artifact]:
        if isinstance(reply, BaseException):
            raise reply
        if isinstance(reply, str):
            for start in range(0, len(reply), self.chunk):
                yield TextDelta(reply[start : start + self.chunk])
            return
        for artifact in reply:
            yield artifact


class GatedProcessor:
    """Streams one delta, then waits for `release()` (or cancellation) before finishing.

    `started` is set once a turn is inside the model stream, so tests can interrupt
    a turn that is provably running without sleeping.
    """

    def __init__(self, reply: str = "done") -> None:
        self.reply = reply
        self.started = asyncio.Event()
        self.cancelled = 0
        self.calls = 0
        self._gate = asyncio.Event()

    def release(self) -> None:
        """Let every waiting and future turn finish."""
        self._gate.set()

    async def __call__(self, ctx: TurnContext) -> None:
        self.calls += 1
        await ctx.step(self._stream())

    async def _stream(self) -> AsyncIterator[Artifact]:
        yield TextDelta("…")
        self.started.set()
        try:
            await self._gate.wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        finally:
            self.started.clear()
        yield TextDelta(self.reply)


class SlowEcho:
    """Answers `answer to <what the user said>.` in four deltas, `pause` seconds apart,
    so that faults injected under load land in the middle of answers. `answer(text)` is
    the reply to `text`."""

    def __init__(self, pause: float = 0.02, *, strip: str = "") -> None:
        self.pause = pause
        self.strip = strip  # removed from what the user said (a bot mention, say)

    @staticmethod
    def answer(text: str) -> str:
        """The whole reply to `text`."""
        return f"answer to {text}."

    async def __call__(self, ctx: TurnContext) -> None:
        said = " ".join(a.content for a in ctx.turns()[-1].artifacts if isinstance(a, Text))
        await ctx.step(self._deltas(said.replace(self.strip, "") if self.strip else said))

    async def _deltas(self, said: str) -> AsyncIterator[Artifact]:
        for piece in ("answer ", "to ", said, "."):
            await asyncio.sleep(self.pause)
            yield TextDelta(piece)
