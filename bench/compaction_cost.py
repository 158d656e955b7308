"""A long thread with and without compaction: request size and time to first token.

In one process: a real Manager and MemoryStore, the openai processor talking HTTP to
the mock model (`ore_openai.testing`, answering at once), and the compaction step
with a small context window. A thread is filled to `turns` turns, then the last
`measured` messages are timed (sending to the first text delta) and the size of the
request each made is read at the mock. Run alone with
`python bench/model_path.py --only-compaction`.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from ore_core import EventContext, Manager, UserMessageEvent
from ore_core.config import CompactionSettings
from ore_core.jsonutil import dumps
from ore_core.session.compactor import SUMMARY_PROMPT, Compactor
from ore_core.session.stores.memory import MemoryStore
from ore_openai.config import OpenAIConfig
from ore_openai.processor import OpenAIProcessor
from ore_openai.testing import MockOpenAIServer, MockResponse

__all__ = ["CompactionRow", "compaction_rows"]

FILLER = "fill " + "words " * 30


@dataclass(frozen=True, slots=True)
class CompactionRow:
    """The last measured turns of one thread."""

    name: str
    request_bytes: int
    first_token_ms: float
    summaries: int


def _is_summary(body: dict[str, Any]) -> bool:
    return SUMMARY_PROMPT in str(body["messages"][-1].get("content", ""))


def _respond(body: dict[str, Any]) -> MockResponse:
    if _is_summary(body):
        return MockResponse("The user sent filler; nothing was decided.", chunk_size=64)
    return MockResponse("an answer of a few words", chunk_size=64)


async def _thread(turns: int, measured: int, window: int, enabled: bool) -> CompactionRow:
    with MockOpenAIServer(responder=_respond) as server:
        config = OpenAIConfig(base_url=server.base_url, model="mock-model", max_retries=0)
        compactor = Compactor(CompactionSettings(enabled=enabled, context_window=window))
        async with (
            OpenAIProcessor(config) as processor,
            Manager(MemoryStore(), processor, interceptors=[compactor]) as manager,
        ):
            stream = await manager.create()
            firsts = []
            for number in range(turns // 2):
                event = UserMessageEvent(content=FILLER, context=EventContext(provenance="b"))
                async with stream.subscribe("text_delta") as deltas:
                    started = time.perf_counter()
                    answered = asyncio.ensure_future(stream.process(event))
                    await anext(deltas)
                    first = time.perf_counter() - started
                    await answered
                if number >= turns // 2 - measured:
                    firsts.append(first)
        answers = [b for b in server.requests if not _is_summary(b)]
        sizes = [len(dumps(body)) for body in answers[-measured:]]
    name = f"turn {turns}, {'with' if enabled else 'without'} compaction"
    return CompactionRow(
        name,
        sum(sizes) // len(sizes),
        sorted(firsts)[len(firsts) // 2] * 1e3,
        len(server.requests) - len(answers),
    )


def compaction_rows(
    turns: int = 500, window: int = 8_000, measured: int = 10
) -> list[CompactionRow]:
    """Both threads, without compaction first."""
    return [asyncio.run(_thread(turns, measured, window, enabled)) for enabled in (False, True)]
