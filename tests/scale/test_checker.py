"""The fault runs' checker sorts every message into exactly one of Jepsen's classes."""

from __future__ import annotations

from tests.scale.checker import Verdict, check, check_thread


def test_every_message_answered_once_in_order_is_ok() -> None:
    assert check_thread(3, [1, 2, 3], []) == Verdict(ok=3)


def test_missing_messages_are_lost_by_where_they_lie() -> None:
    verdict = check_thread(6, [2, 4], [])
    assert (verdict.lost_prefix, verdict.lost_middle, verdict.lost_postfix) == (1, 1, 2)


def test_a_message_whose_user_turn_was_stored_but_never_answered_is_unanswered() -> None:
    assert check_thread(2, [1], [2]) == Verdict(ok=1, unanswered=1)


def test_an_answer_to_a_number_never_sent_is_unexpected() -> None:
    assert check_thread(1, [1, 7], []) == Verdict(ok=1, unexpected=1)


def test_an_answer_given_twice_is_duplicated() -> None:
    assert check_thread(2, [1, 1, 2], []) == Verdict(ok=1, duplicated=1)


def test_an_answer_after_a_later_ones_is_reordered() -> None:
    assert check_thread(3, [1, 3, 2], []) == Verdict(ok=3, reordered=1)


def test_the_total_sums_threads_and_names_only_the_bad_ones() -> None:
    total, bad = check({"a": 2, "b": 2}, {"a": [1, 2], "b": [2]}, [])
    assert total == Verdict(ok=3, lost_prefix=1)
    assert list(bad) == ["b"]
