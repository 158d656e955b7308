"""SlackApi: every Web API call of the conduit, with `ok` checked and rate limits honoured.

- A refusal (`ok: false`, at any HTTP status) raises `SlackError` with Slack's error code.
- Throttling (HTTP 429, or `ok: false` with `ratelimited`) blocks that method for the
  whole workspace for `Retry-After` seconds, then the call is tried again: Slack did not
  act on a throttled call, so a retry is safe for every method. A caller that must not
  give up (a relayed copy: a rate limit delays it, never drops it) passes `throttled`,
  awaited at each throttling, and the call is tried until Slack takes it.
- A call whose outcome is unknown (the connection dropped, a 5xx, a timeout) is retried
  only for methods that are safe to repeat; for the others (`chat.postMessage`,
  `chat.startStream`, `chat.appendStream`, ...) it raises `Ambiguous` so the caller
  reconciles against what Slack shows (message metadata) instead of posting twice.
- `Budget` is a token bucket per workspace that intermediate edits draw from.

The SDK client is built with no retry handlers of its own: its default connection-error
retry would re-post a message whose response was lost.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import structlog
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from ore_core import OreError
from ore_core.conduit import metrics

__all__ = ["Ambiguous", "Budget", "SlackApi", "SlackError"]

log = structlog.get_logger("ore.conduit.slack")

_READS = frozenset({"conversations.replies", "auth.test"})  # sent as GET with params
_REPEATABLE = frozenset(
    {"auth.test", "conversations.replies", "chat.update", "assistant.threads.setStatus"}
)
_ATTEMPTS = 5  # tries of a repeatable call, and of a throttled one
_DEFAULT_RETRY_AFTER = 1.0  # seconds, when Slack throttles without saying how long


class SlackError(OreError):
    """Slack refused a call: `error` is its code (`msg_too_long`, `invalid_auth`, ...)."""

    def __init__(self, method: str, error: str) -> None:
        super().__init__(f"{method}: {error}")
        self.method = method
        self.error = error


class Ambiguous(OreError):
    """The outcome of a call is unknown: Slack may or may not have acted on it."""

    def __init__(self, method: str, cause: str) -> None:
        # A read changes nothing: whether Slack "carried it out" does not matter.
        effect = "is the network up?" if method in _READS else "it may have been carried out"
        super().__init__(f"{method}: no answer ({cause}); {effect}")
        self.method = method


class Budget:
    """A token bucket: `rate` calls per second, bursts of `burst`; time from `now`."""

    def __init__(self, rate: float, burst: float, now: Callable[[], float]) -> None:
        self.rate = rate
        self.burst = burst
        self._now = now
        self._tokens = burst
        self._stamp = now()

    def _refill(self) -> None:
        now = self._now()
        self._tokens = min(self.burst, self._tokens + (now - self._stamp) * self.rate)
        self._stamp = now

    def try_take(self, reserve: float = 0) -> bool:
        """Take a token if one is there beyond `reserve`; False (nothing taken) otherwise."""
        self._refill()
        if self._tokens >= 1 + reserve:
            self._tokens -= 1
            return True
        return False

    def wait_time(self) -> float:
        """Seconds until a token is there."""
        self._refill()
        return 0.0 if self._tokens >= 1 else (1 - self._tokens) / self.rate

    def drain(self) -> None:
        """Spend every token (Slack throttled us: we were wrong about the budget)."""
        self._refill()
        self._tokens = min(self._tokens, 0.0)

    async def take(self) -> None:
        """Wait for a token and take it."""
        while True:
            if self.try_take():
                return
            await asyncio.sleep(self.wait_time())


class SlackApi:
    """The conduit's Web API calls for one bot token; shared by every task of the conduit.

    Throttling is tracked per (team, method): Slack's limits are per workspace and method.
    """

    def __init__(self, client: AsyncWebClient) -> None:
        self.client = client
        self._loop = asyncio.get_running_loop()
        self._blocked: dict[tuple[str, str], float] = {}  # (team, method) -> loop time

    def now(self) -> float:
        """The clock of rate limits (the event loop's)."""
        return self._loop.time()

    async def call(
        self,
        method: str,
        team: str = "",
        *,
        throttled: Callable[[], Awaitable[None]] | None = None,
        **args: Any,
    ) -> dict[str, Any]:
        """Call `method`; its response data (`ok` is true). See the module docstring."""
        attempt = 0
        while True:
            attempt += 1
            await self._wait_unblocked(team, method)
            try:
                return await self._send(method, args)
            except SlackApiError as exc:
                response = exc.response
                status = int(getattr(response, "status_code", 0) or 0)
                data = response.data if isinstance(response.data, dict) else {}
                error = str(data.get("error") or f"http_{status}")
                if status == 429 or error == "ratelimited":
                    self._throttle(team, method, response.headers)
                    if throttled is not None:
                        await throttled()
                        continue
                    if attempt < _ATTEMPTS:
                        continue
                    raise SlackError(method, "ratelimited") from None
                if status >= 500 or not data:
                    failure = f"HTTP {status}"
                else:
                    raise SlackError(method, error) from None
            except (aiohttp.ClientError, TimeoutError) as exc:
                failure = type(exc).__name__
            if method not in _REPEATABLE or attempt >= _ATTEMPTS:
                raise Ambiguous(method, failure)
            log.info("slack call failed, retrying", method=method, error=failure)
            await asyncio.sleep(0.05 * 2**attempt)

    async def _send(self, method: str, args: dict[str, Any]) -> dict[str, Any]:
        if method in _READS:
            response = await self.client.api_call(method, http_verb="GET", params=args)
        else:
            response = await self.client.api_call(method, json=args)
        data = response.data
        assert isinstance(data, dict)
        return data

    def _throttle(self, team: str, method: str, headers: Any) -> None:
        try:
            pause = float((headers or {}).get("retry-after") or _DEFAULT_RETRY_AFTER)
        except (TypeError, ValueError):
            pause = _DEFAULT_RETRY_AFTER
        until = self.now() + max(pause, 0.0)
        key = (team, method)
        self._blocked[key] = max(self._blocked.get(key, 0.0), until)
        log.info("slack throttled a call", method=method, team=team, retry_after=pause)
        metrics.rate_limited("slack")

    def blocked_for(self, team: str, method: str) -> float:
        """Seconds `method` stays throttled in `team` (0: callable now)."""
        return max(0.0, self._blocked.get((team, method), 0.0) - self.now())

    async def _wait_unblocked(self, team: str, method: str) -> None:
        while True:
            pause = self.blocked_for(team, method)
            if pause <= 0:
                return
            await asyncio.sleep(pause)
