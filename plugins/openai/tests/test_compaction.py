"""Compaction with the OpenAI processor: real Manager, MemoryStore and HTTP to the mock model,
with a small context window so a long thread must be summarised to keep answering."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from ore_core import EventContext, Manager, NoticeEvent, OutputEvent, Role, Stream
from ore_core.conduit.feed import Delivery
from ore_core.conduit.relay import ThreadSettings, classify
from ore_core.config import CompactionSettings
from ore_core.events import UserMessageEvent
from ore_core.jsonutil import dumps
from ore_core.session.compaction import BOUNDARY_INFO_KEY, COPY_OF, SUMMARY_MARK, BoundaryInfo
from ore_core.session.compactor import SUMMARY_PROMPT, Compactor
from ore_core.session.slash import default_commands
from ore_core.session.stores.memory import MemoryStore
from ore_core.turn import TraversalControl, Turn
from ore_openai.config import OpenAIConfig
from ore_openai.processor import OpenAIProcessor
from ore_openai.testing import MockOpenAIServer, MockResponse

WINDOW = 2_000
SUMMARY = "Summary: the user counts messages; keep answering in one line."


def is_summary_request(body: dict[str, Any]) -> bool:
    return SUMMARY_PROMPT in str(body["messages"][-1].get("content", ""))


def answers(summary: MockResponse | None = None) -> Any:
    """The mock's responder: a fixed summary for summary requests, else a short answer."""

    def respond(body: dict[str, Any]) -> MockResponse:
        if is_summary_request(body):
            return summary or MockResponse(SUMMARY)
        return MockResponse(f"answer {len(body['messages'])}")

    return respond


def request_tokens(body: dict[str, Any]) -> int:
    """What the mock itself counts for a request (its usage estimate)."""
    return len(dumps(body["messages"])) // 4


@asynccontextmanager
async def compacting(server: MockOpenAIServer, **settings: Any) -> AsyncIterator[Stream]:
    config = OpenAIConfig(base_url=server.base_url, model="mock-model", max_retries=0)
    compactor = Compactor(
        CompactionSettings(**{"context_window": WINDOW, "keep_last": 4, **settings})
    )
    processor = OpenAIProcessor(config)
    interceptors = [compactor, default_commands()]
    async with processor, Manager(MemoryStore(), processor, interceptors=interceptors) as manager:
        yield await manager.create()


def message(text: str) -> UserMessageEvent:
    return UserMessageEvent(content=text, context=EventContext(provenance="test"))


async def say(stream: Stream, text: str) -> list[OutputEvent]:
    async with stream.subscribe() as subscription:
        async with asyncio.timeout(10):
            await stream.process(message(text))
        events = []
        while (event := subscription.get_nowait()) is not None:
            events.append(event)
        return events


def filler(number: int) -> str:
    return f"message {number}: " + "words to fill the context window " * 3


def notices(events: list[OutputEvent]) -> list[str]:
    return [event.content for event in events if isinstance(event, NoticeEvent)]


async def fill_until_notice(stream: Stream) -> tuple[list[Turn], list[OutputEvent]]:
    """Send filler until a message brings a notice: the path before it and its events."""
    for number in range(200):
        before = stream.turns()
        events = await say(stream, filler(number))
        if notices(events):
            return before, events
    raise AssertionError("no compaction within 200 messages")


async def test_a_500_turn_thread_keeps_answering_and_every_request_fits_the_window(
    ore_mock_openai: MockOpenAIServer,
) -> None:
    ore_mock_openai.responder = answers()
    async with compacting(ore_mock_openai) as stream:
        for number in range(250):
            await say(stream, filler(number))
        assert len(stream.turns()) < 80
        assert stream.turns()[-1].role == Role.ASSISTANT
    bodies = ore_mock_openai.requests
    assert sum(not is_summary_request(body) for body in bodies) == 250
    assert sum(is_summary_request(body) for body in bodies) > 5
    assert max(request_tokens(body) for body in bodies) < WINDOW


async def test_the_summary_the_boundary_and_the_verbatim_tail_are_where_they_should_be(
    ore_mock_openai: MockOpenAIServer,
) -> None:
    ore_mock_openai.responder = answers()
    async with compacting(ore_mock_openai) as stream:
        before, events = await fill_until_notice(stream)
        path = stream.turns()
        info = BoundaryInfo.decode(stream.get_metadata(BOUNDARY_INFO_KEY))
        assert info is not None
        summary, _first_user, _first_answer, *tail = path
        assert SUMMARY_MARK in summary.extra
        assert summary.role == Role.SYSTEM
        assert summary.control == TraversalControl.STOP
        assert summary.id == info.summary_turn_id
        assert SUMMARY in summary.artifacts[0].content  # type: ignore[attr-defined]
        originals = [dict(turn.extra).get(COPY_OF) for turn in path[1:-2]]
        assert originals == [turn.id for turn in [*before[:2], *before[-4:]]]
        assert [turn.role for turn in tail[-2:]] == [Role.USER, Role.ASSISTANT]
        assert tail[-2].event_id != before[-2].event_id  # the new message, recorded once
        assert info.previous_tip == before[-1].id
        assert info.dropped_turn_count == len(before) - 6
        assert stream.state().get_turn(before[-1].id) == before[-1]  # the old branch is kept
        assert notices(events) == [
            f"↳ earlier conversation summarised ({len(before) - 6} turns, "
            f"~{info.dropped_token_estimate} → ~{info.summary_token_estimate} tokens; "
            "/uncompact restores them)"
        ]


async def test_every_endpoint_of_a_bridged_thread_is_shown_the_compaction_line_once(
    ore_mock_openai: MockOpenAIServer,
) -> None:
    ore_mock_openai.responder = answers()
    async with compacting(ore_mock_openai) as stream:
        _, events = await fill_until_notice(stream)
    (line,) = [event for event in events if isinstance(event, NoticeEvent)]
    linked = ThreadSettings(gateway="support", answer="origin")
    shown = {
        endpoint: classify(Delivery(stream.id, line, 7), endpoint, linked).action
        for endpoint in ("slack", "telegram", "web", "nats", "test")
    }
    assert shown == dict.fromkeys(shown, "answer")  # the sender's endpoint too, once each


async def test_a_failing_summariser_keeps_the_history_answers_and_waits_before_retrying(
    ore_mock_openai: MockOpenAIServer,
) -> None:
    ore_mock_openai.responder = answers(MockResponse.http_error(400, "no summaries today"))
    async with compacting(ore_mock_openai, retry_after=3) as stream:
        before, failed = await fill_until_notice(stream)
        after_failure = await say(stream, "second over the window")
        path = stream.turns()
    summary_requests = [body for body in ore_mock_openai.requests if is_summary_request(body)]
    assert len(summary_requests) == 1
    assert path[: len(before)] == before
    assert len(path) == len(before) + 4
    assert [n for n in notices(failed) if "the whole thread is kept" in n]
    assert notices(after_failure) == []
    assert path[-1].role == Role.ASSISTANT


async def test_a_summary_no_shorter_than_the_turns_is_refused(
    ore_mock_openai: MockOpenAIServer,
) -> None:
    ore_mock_openai.responder = answers(MockResponse("very long summary " * 1000))
    async with compacting(ore_mock_openai) as stream:
        _, events = await fill_until_notice(stream)
        assert stream.get_metadata(BOUNDARY_INFO_KEY) is None
        assert [n for n in notices(events) if "not shorter" in n]


async def test_compact_now_and_uncompact_restores_the_path(
    ore_mock_openai: MockOpenAIServer,
) -> None:
    ore_mock_openai.responder = answers()
    async with compacting(ore_mock_openai, context_window=100_000) as stream:
        for number in range(6):
            await say(stream, filler(number))
        before = stream.turns()
        compacted = await say(stream, "/compact the counting")
        assert SUMMARY_MARK in stream.turns()[0].extra
        assert "Focus on: the counting" in ore_mock_openai.requests[-1]["messages"][-1]["content"]
        await say(stream, "one more")
        restored = await say(stream, "/uncompact")
        path = stream.turns()
    assert [n for n in notices(compacted) if "summarised" in n]
    assert [n for n in notices(restored) if "Restored" in n]
    assert path[: len(before)] == before
    assert [turn.role for turn in path[len(before) :]] == [Role.USER, Role.ASSISTANT]


async def test_undo_right_after_a_compaction_undoes_the_compaction(
    ore_mock_openai: MockOpenAIServer,
) -> None:
    ore_mock_openai.responder = answers()
    async with compacting(ore_mock_openai, context_window=100_000) as stream:
        for number in range(6):
            await say(stream, filler(number))
        before = stream.turns()
        await say(stream, "/compact")
        await say(stream, "/undo")
        assert stream.turns() == before
