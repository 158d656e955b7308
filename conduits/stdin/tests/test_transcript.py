"""Transcript: deltas grow blocks, complete artifacts settle them with their exact content."""

from __future__ import annotations

from ore_conduit_stdin.transcript import Block, Transcript
from ore_core import Reasoning, ReasoningDelta, StopReason, Text, TextDelta, ToolCall, ToolResult


def test_text_deltas_grow_one_open_block() -> None:
    transcript = Transcript()
    transcript.add(TextDelta("Hel"))
    transcript.add(TextDelta("lo"))
    assert transcript.blocks == [Block("text", "Hello", open=True)]
    assert transcript.streaming


def test_the_complete_text_settles_the_block_with_its_own_content() -> None:
    transcript = Transcript()
    transcript.add(TextDelta("Hel"))  # "lo" was lost on the way
    transcript.add(Text("Hello"))
    assert transcript.blocks == [Block("text", "Hello")]
    assert not transcript.streaming


def test_a_complete_text_without_deltas_is_a_block_of_its_own() -> None:
    transcript = Transcript()
    transcript.add(Text("Hello"))
    assert transcript.blocks == [Block("text", "Hello")]


def test_a_complete_text_settles_the_oldest_open_block_when_deltas_overtook_it() -> None:
    transcript = Transcript()
    transcript.add(TextDelta("first"))
    transcript.add(ToolCall("c1", "search", '{"q":"x"}'))
    transcript.add(TextDelta("sec"))  # the next step streams before "first" is stored
    transcript.add(Text("first!"))
    assert [(b.content, b.open) for b in transcript.blocks] == [
        ("first!", False),
        ('search {"q":"x"}', False),
        ("sec", True),
    ]


def test_reasoning_and_text_are_separate_blocks() -> None:
    transcript = Transcript()
    transcript.add(ReasoningDelta("hmm"))
    transcript.add(TextDelta("answer"))
    transcript.add(Reasoning("hmm."))
    assert [(b.kind, b.content) for b in transcript.blocks] == [
        ("reasoning", "hmm."),
        ("text", "answer"),
    ]


def test_a_failed_tool_result_is_marked_as_an_error() -> None:
    transcript = Transcript()
    transcript.add(ToolResult("c1", "boom", is_error=True))
    assert transcript.blocks == [Block("tool_result", "boom", error=True)]


def test_artifacts_with_nothing_to_show_are_ignored() -> None:
    transcript = Transcript()
    assert not transcript.add(StopReason("stop"))
    assert transcript.blocks == []
