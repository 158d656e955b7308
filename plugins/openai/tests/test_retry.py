"""Retry waits: Retry-After parsing and exponential backoff."""

from __future__ import annotations

import pytest

from ore_openai.retry import RetryPolicy, retry_after_seconds


def test_retry_after_in_seconds_may_be_fractional() -> None:
    assert retry_after_seconds({"Retry-After": "1.5"}) == 1.5


def test_retry_after_ms_wins_over_retry_after() -> None:
    assert retry_after_seconds({"retry-after-ms": "250", "retry-after": "9"}) == 0.25


def test_retry_after_as_http_date_is_the_time_until_then() -> None:
    headers = {"Retry-After": "Wed, 21 Oct 2015 07:28:10 GMT"}
    assert retry_after_seconds(headers, now=lambda: 1445412480.0) == 10.0


def test_unreadable_or_missing_retry_after_is_none() -> None:
    assert retry_after_seconds({"Retry-After": "soon"}) is None
    assert retry_after_seconds({}) is None


def test_backoff_doubles_per_retry_with_at_most_a_quarter_of_jitter() -> None:
    policy = RetryPolicy(max_retries=3, backoff=1.0, max_wait=60)
    for retry, full in enumerate([1.0, 2.0, 4.0]):
        delay = policy.delay(retry, None)
        assert delay is not None
        assert 0.75 * full <= delay <= full


def test_backoff_never_exceeds_max_wait() -> None:
    assert RetryPolicy(max_retries=10, backoff=1.0, max_wait=3.0).delay(9, None) == 3.0


def test_no_delay_once_the_retries_are_used_up() -> None:
    assert RetryPolicy(max_retries=2).delay(2, None) is None


def test_retry_after_replaces_the_backoff() -> None:
    assert RetryPolicy(backoff=5.0).delay(0, 0.2) == 0.2


@pytest.mark.parametrize("asked", [61.0, 3600.0])
def test_a_retry_after_longer_than_max_wait_gives_up(asked: float) -> None:
    assert RetryPolicy(max_wait=60.0).delay(0, asked) is None
