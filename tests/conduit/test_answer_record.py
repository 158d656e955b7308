"""AnswerRecord: what a conduit keeps per thread to tell an answer it showed from a new
one after a restart (ore_core.conduit.answers)."""

from __future__ import annotations

import pytest

from ore_core.conduit import AnswerRecord


def test_an_answer_being_written_keeps_the_thread_s_upto_from_when_it_began() -> None:
    record = AnswerRecord.of("t-2", [7], final=False, sequence=12, after=9)
    assert (record.upto, record.final) == (9, False)


def test_a_finished_answer_moves_upto_to_its_last_stored_batch() -> None:
    record = AnswerRecord.of("t-2", [7], final=True, sequence=12, after=9)
    assert record.upto == 12


def test_another_answer_stored_at_or_before_upto_was_shown() -> None:
    record = AnswerRecord.of("t-2", [7], final=True, sequence=12, after=9)
    assert record.judge("t-1", 12) == "shown"


@pytest.mark.parametrize("sequence", [13, None])
def test_another_answer_after_upto_or_live_is_new(sequence: int | None) -> None:
    record = AnswerRecord.of("t-2", [7], final=True, sequence=12, after=9)
    assert record.judge("t-3", sequence) == "new"


def test_the_recorded_answer_unfinished_is_resumed_and_finished_is_shown() -> None:
    writing = AnswerRecord.of("t-2", [7], final=False, sequence=12, after=9)
    done = AnswerRecord.of("t-2", [7], final=True, sequence=12, after=9)
    assert (writing.judge("t-2", 12), done.judge("t-2", 12)) == ("resume", "shown")


def test_a_record_round_trips_through_json_with_the_conduit_s_extra_keys() -> None:
    record = AnswerRecord.of(
        "t-2", [["1.2", 0, None, True]], final=False, sequence=3, after=2, native=True
    )
    assert AnswerRecord.loads(record.dumps()) == record
    assert record.extra == {"native": True}


@pytest.mark.parametrize("text", [None, "", "not json", "[1, 2]", '{"upto": "x"}'])
def test_a_missing_or_damaged_record_reads_as_empty(text: str | None) -> None:
    assert AnswerRecord.loads(text) == AnswerRecord()
    assert AnswerRecord().judge("t-1", 1) == "new"
