"""When and how long to wait before asking the model server again.

Only failures before the first streamed chunk are retried: after that, deltas have
reached the user and a second answer would interleave with the first. Rate limits
(429), timeouts (408), conflicts (409), server errors (5xx) and connection failures
are retried; other statuses are the caller's mistake and fail at once.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from email.utils import parsedate_to_datetime

import openai

__all__ = ["RetryPolicy", "is_retryable", "retry_after_seconds"]

_RETRYABLE_STATUS = frozenset({408, 409, 429})


def is_retryable(exc: openai.APIError) -> bool:
    """True for rate limits, server errors and connection failures."""
    if isinstance(exc, openai.APIStatusError):
        return exc.status_code in _RETRYABLE_STATUS or exc.status_code >= 500
    return isinstance(exc, openai.APIConnectionError)


def retry_after_seconds(
    headers: Mapping[str, str], now: Callable[[], float] = time.time
) -> float | None:
    """The wait a server asked for (`retry-after-ms`, or `retry-after` seconds or date)."""
    lowered = {name.lower(): value for name, value in headers.items()}
    milliseconds = lowered.get("retry-after-ms")
    if milliseconds is not None:
        try:
            return max(0.0, float(milliseconds) / 1000)
        except ValueError:
            pass
    value = lowered.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - now())
    except (TypeError, ValueError):
        return None


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """`max_retries` more attempts after the first, exponential backoff with jitter.

    A server's `Retry-After` replaces the backoff; a wait longer than `max_wait` is
    not made (the call fails instead, naming the wait the server asked for).
    """

    max_retries: int = 3
    backoff: float = 0.5
    max_wait: float = 60.0

    def delay(self, retry: int, retry_after: float | None) -> float | None:
        """Seconds to wait before retry number `retry` (0-based), or None to give up."""
        if retry >= self.max_retries:
            return None
        if retry_after is not None:
            return retry_after if retry_after <= self.max_wait else None
        # Up to 25% jitter keeps many clients from retrying in lockstep.
        wait = self.backoff * 2.0**retry * (1 - 0.25 * random.random())
        return min(wait, self.max_wait)
