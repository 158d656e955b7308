"""SlackApi: every Web API call of the conduit, `ok` checked and each failure classified once.

`once` makes one call and classifies what went wrong in the engine's words
(`ore_core.conduit.Platform`): a refusal (`ok: false`, at any HTTP status) is a
`SlackError` (`Refused`, with the reason its code means); throttling (HTTP 429, or `ok:
false` with `ratelimited`) is `Throttled` (`RateLimited` with Slack's `Retry-After`), and
blocks that method for the workspace until then (`blocked_for`: the edit budget reads
it); a call whose outcome is unknown (the connection dropped, a 5xx, a timeout) is
`Ambiguous` (`Transient`): Slack may or may not have acted on it.

`call` is `once` tried again by the SDK's one policy (`until_answered`) while Slack
throttles it (after its `Retry-After`) or, for a method safe to repeat, does not
answer; a post whose outcome is unknown is never repeated blindly: the caller finds it
(message metadata) instead of posting twice. `Budget` is a token bucket per workspace
that intermediate edits draw from.

The SDK client is built with no retry handlers of its own: its default connection-error
retry would re-post a message whose response was lost.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import aiohttp
import structlog
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from ore_core import OreError
from ore_core.conduit import FailureReason, RateLimited, Refused, Transient, metrics, until_answered

__all__ = ["Ambiguous", "Budget", "SlackApi", "SlackError", "Throttled"]

log = structlog.get_logger("ore.conduit.slack")

_READS = frozenset({"conversations.replies", "auth.test", "users.info"})  # GET with params
_REPEATABLE = frozenset(
    {"auth.test", "conversations.replies", "chat.update", "assistant.threads.setStatus"}
    | {"users.info", "chat.delete", "reactions.add", "reactions.remove"}
)
_FORMS = frozenset({"files.getUploadURLExternal", "files.completeUploadExternal"})
"""Methods Slack takes as a form only (no JSON body)."""
_ATTEMPTS = 5  # tries of a repeatable call, and of a throttled one
_DEFAULT_RETRY_AFTER = 1.0  # seconds, when Slack throttles without saying how long
_REASONS: dict[str, FailureReason] = {
    **dict.fromkeys(
        (
            "not_in_channel",
            "channel_not_found",
            "missing_scope",
            "not_authed",
            "invalid_auth",
            "account_inactive",
            "token_revoked",
            "is_archived",
            "restricted_action",
            "cant_update_message",
            "cant_delete_message",
            "ekm_access_denied",
        ),
        "refused_permission",
    ),
    "msg_too_long": "refused_too_large",
    "file_too_large": "refused_too_large",
    "msg_blocks_too_long": "refused_too_large",
}
"""Slack's error codes by the reason a delivery report gives (others: unsupported)."""


class SlackError(Refused, OreError):
    """Slack refused a call: `error` is its code (`msg_too_long`, `invalid_auth`, ...)."""

    def __init__(self, method: str, error: str) -> None:
        super().__init__(f"{method}: {error}", _REASONS.get(error, "refused_unsupported"))
        self.method = method
        self.error = error


class Throttled(RateLimited, OreError):
    """Slack throttled a call: try again after `wait` seconds."""

    def __init__(self, method: str, wait: float) -> None:
        super().__init__("rate limited by Slack", wait)  # what delivery reports say
        self.method = method


class Ambiguous(Transient, OreError):
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

    async def call(self, method: str, team: str = "", **args: Any) -> dict[str, Any]:
        """`once`, tried again while it is throttled or, for a method safe to repeat,
        not answered; at most `_ATTEMPTS` tries (module docstring)."""
        tries = 0

        async def attempt() -> dict[str, Any]:
            nonlocal tries
            tries += 1
            await asyncio.sleep(self.blocked_for(team, method))
            try:
                return await self.once(method, team, **args)
            except Throttled:
                metrics.rate_limited("slack")
                raise

        def passing(error: BaseException) -> bool:
            return isinstance(error, Throttled) or (
                isinstance(error, Ambiguous) and method in _REPEATABLE
            )

        return await until_answered(
            attempt,
            f"slack {method}",
            passing=passing,
            stopped=lambda: tries >= _ATTEMPTS,
            level="info",
            method=method,
        )

    async def once(self, method: str, team: str = "", **args: Any) -> dict[str, Any]:
        """Call `method` once; its response data (`ok` is true), else the failure
        classified (module docstring)."""
        try:
            if method in _READS:
                response = await self.client.api_call(method, http_verb="GET", params=args)
            elif method in _FORMS:
                form = {k: v if isinstance(v, str) else json.dumps(v) for k, v in args.items()}
                response = await self.client.api_call(method, data=form)
            else:
                response = await self.client.api_call(method, json=args)
        except SlackApiError as exc:
            response = exc.response
            status = int(getattr(response, "status_code", 0) or 0)
            data = response.data if isinstance(response.data, dict) else {}
            error = str(data.get("error") or f"http_{status}")
            if status == 429 or error == "ratelimited":
                raise Throttled(method, self._throttle(team, method, response.headers)) from None
            if status >= 500 or not data:
                raise Ambiguous(method, f"HTTP {status}") from None
            raise SlackError(method, error) from None
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise Ambiguous(method, type(exc).__name__) from None
        assert isinstance(response.data, dict)
        return response.data

    def _throttle(self, team: str, method: str, headers: Any) -> float:
        try:
            pause = float((headers or {}).get("retry-after") or _DEFAULT_RETRY_AFTER)
        except (TypeError, ValueError):
            pause = _DEFAULT_RETRY_AFTER
        pause = max(pause, 0.0)
        key = (team, method)
        self._blocked[key] = max(self._blocked.get(key, 0.0), self.now() + pause)
        log.info("slack throttled a call", method=method, team=team, retry_after=pause)
        return pause

    def blocked_for(self, team: str, method: str) -> float:
        """Seconds `method` stays throttled in `team` (0: callable now)."""
        return max(0.0, self._blocked.get((team, method), 0.0) - self.now())
