"""Token buckets per sender, bounded so that many senders cannot exhaust memory.

A bucket holds up to `burst` tokens and refills at `rate` tokens per `per` seconds;
each message takes one. At most `max_keys` buckets are kept: the least recently used
one is forgotten first (its sender simply starts again with a full bucket).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass

__all__ = ["Clock", "RateLimiter"]

Clock = Callable[[], float]
"""Seconds on a monotonic scale (`time.monotonic`); tests pass a clock they advance."""


@dataclass(slots=True)
class _Bucket:
    tokens: float
    updated: float


class RateLimiter:
    """Decides, per key, whether one more message is allowed now.

    Not thread-safe: call it from the event loop that runs the interceptor (every
    stream of a Manager shares that loop, so no lock is needed).
    """

    def __init__(
        self,
        rate: int,
        per: float,
        burst: int,
        *,
        max_keys: int = 10_000,
        clock: Clock = time.monotonic,
    ) -> None:
        self.rate = rate
        self.per = per
        self.burst = burst
        self.max_keys = max_keys
        self._clock = clock
        self._buckets: OrderedDict[Hashable, _Bucket] = OrderedDict()

    def __len__(self) -> int:
        """How many keys have a bucket right now (never more than `max_keys`)."""
        return len(self._buckets)

    def acquire(self, key: Hashable) -> float:
        """Take a token for `key`: 0.0 when allowed, else the seconds until one is free.

        A refused call takes nothing, so retrying after the returned delay succeeds.
        """
        now = self._clock()
        bucket = self._bucket(key, now)
        # Multiply before dividing: elapsed * rate / per is exact for whole seconds.
        elapsed = max(0.0, now - bucket.updated)
        bucket.tokens = min(float(self.burst), bucket.tokens + elapsed * self.rate / self.per)
        bucket.updated = now
        if bucket.tokens >= 1.0:
            bucket.tokens -= 1.0
            return 0.0
        return (1.0 - bucket.tokens) * self.per / self.rate

    def _bucket(self, key: Hashable, now: float) -> _Bucket:
        bucket = self._buckets.get(key)
        if bucket is not None:
            self._buckets.move_to_end(key)
            return bucket
        bucket = self._buckets[key] = _Bucket(float(self.burst), now)
        if len(self._buckets) > self.max_keys:
            self._buckets.popitem(last=False)
        return bucket
