"""The token bucket: burst, refill, separate keys, bounded memory."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ore_guard.ratelimit import RateLimiter

if TYPE_CHECKING:
    from conftest import FakeClock


def limiter(
    clock: FakeClock, *, rate: int = 3, per: float = 60, burst: int = 3, **kw: int
) -> RateLimiter:
    return RateLimiter(rate, per, burst, clock=clock, **kw)


def test_a_burst_passes_and_the_next_message_is_refused(clock: FakeClock) -> None:
    bucket = limiter(clock)
    assert [bucket.acquire("alice") for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.acquire("alice") > 0


def test_a_refused_message_learns_when_the_next_token_arrives(clock: FakeClock) -> None:
    bucket = limiter(clock, rate=3, per=60)
    for _ in range(3):
        bucket.acquire("alice")
    assert bucket.acquire("alice") == pytest.approx(20.0)
    clock.advance(5)
    assert bucket.acquire("alice") == pytest.approx(15.0)


def test_one_token_returns_after_per_divided_by_rate_seconds(clock: FakeClock) -> None:
    bucket = limiter(clock, rate=3, per=60)
    for _ in range(3):
        bucket.acquire("alice")
    clock.advance(20)
    assert bucket.acquire("alice") == 0.0
    assert bucket.acquire("alice") > 0


def test_refused_attempts_take_no_token(clock: FakeClock) -> None:
    bucket = limiter(clock, burst=1)
    bucket.acquire("alice")
    wait = bucket.acquire("alice")
    for _ in range(10):
        bucket.acquire("alice")
    clock.advance(wait)
    assert bucket.acquire("alice") == 0.0


def test_an_idle_sender_saves_up_no_more_than_the_burst(clock: FakeClock) -> None:
    bucket = limiter(clock, burst=3)
    clock.advance(3600)
    assert [bucket.acquire("alice") == 0.0 for _ in range(4)] == [True, True, True, False]


def test_keys_have_separate_buckets(clock: FakeClock) -> None:
    bucket = limiter(clock, burst=1)
    assert bucket.acquire("alice") == 0.0
    assert bucket.acquire("bob") == 0.0
    assert bucket.acquire("alice") > 0


def test_a_clock_that_goes_back_adds_no_tokens(clock: FakeClock) -> None:
    bucket = limiter(clock, burst=1)
    bucket.acquire("alice")
    clock.advance(-3600)
    assert bucket.acquire("alice") > 0


def test_the_least_recently_used_key_is_forgotten_past_max_keys(clock: FakeClock) -> None:
    bucket = limiter(clock, burst=1, max_keys=2)
    bucket.acquire("alice")
    bucket.acquire("bob")
    assert bucket.acquire("alice") > 0  # refused, but alice is now the most recent
    bucket.acquire("carol")  # forgets bob
    assert len(bucket) == 2
    assert bucket.acquire("alice") > 0
    assert bucket.acquire("bob") == 0.0


def test_buckets_never_outnumber_max_keys(clock: FakeClock) -> None:
    bucket = limiter(clock, max_keys=100)
    for sender in range(10_000):
        bucket.acquire(sender)
    assert len(bucket) == 100


@given(
    gaps=st.lists(st.floats(min_value=0, max_value=100, allow_nan=False), max_size=200),
    rate=st.integers(1, 20),
    per=st.floats(min_value=0.5, max_value=600),
    burst=st.integers(1, 20),
)
def test_no_sender_ever_gets_more_than_burst_plus_the_refill(
    gaps: list[float], rate: int, per: float, burst: int
) -> None:
    now = 0.0
    bucket = RateLimiter(rate, per, burst, clock=lambda: now)
    allowed = 0
    for gap in gaps:
        now += gap
        allowed += bucket.acquire("alice") == 0.0
    assert allowed <= burst + rate * sum(gaps) / per + 1e-9


def test_a_sender_at_the_sustained_rate_is_never_refused(clock: FakeClock) -> None:
    bucket = limiter(clock, rate=3, per=60, burst=1)
    refused = 0
    for _ in range(100):
        refused += bucket.acquire("alice") > 0
        clock.advance(20)
    assert refused == 0
