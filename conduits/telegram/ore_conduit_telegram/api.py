"""BotApi: every Bot API call of the conduit, each failure classified once.

- A refusal (`ok: false`) raises `TelegramError`, a `Refused` with Telegram's code and
  description and the engine's reason (403: permission, "too long": too large).
- Flood control (429 with `parameters.retry_after`) raises `FloodControl`, a
  `RateLimited` with that wait; the pause is noted in `Limits`, so every send and edit
  of that chat (or, for another method, that method) waits it out.
- A call whose outcome is unknown (the connection dropped, a 5xx, a timeout, a 409 of
  a getUpdates still running elsewhere) raises `Transient`.

Nothing here tries again: the engine's pacing (`ore_core.conduit.pacing`) does, once
for every platform. `Limits` spaces sends and edits below Telegram's limits (per chat,
per group, overall) so that flood control is the exception. A group's limit is a
sliding window (no 60 s ever holds more than `group_per_minute`): a token bucket would
let a full burst and its refill into one minute, twice the limit. The token is part of
every URL: it never appears in an error, a log line, or anything handed to the core
(`redact`).
"""

from __future__ import annotations

import asyncio
import json
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import structlog

from ore_core import OreError
from ore_core.conduit import Refused, Transient
from ore_core.conduit.platform import FailureReason, PlatformError, RateLimited

__all__ = [
    "BotApi",
    "Bucket",
    "FileError",
    "FileTooLarge",
    "FloodControl",
    "Limits",
    "SlidingWindow",
    "TelegramError",
    "Upload",
]

log = structlog.get_logger("ore.conduit.telegram")

SENDS = frozenset({"sendMessage", "editMessageText", "sendPhoto", "sendDocument"})
"""The methods that count against Telegram's message limits."""
_LONG_POLL_MARGIN = 10.0  # seconds beyond a getUpdates timeout before the call is given up
_DOWNLOAD_TIMEOUT = 120.0  # seconds one file download or upload may take


@dataclass(frozen=True, slots=True)
class Upload:
    """A file sent with a call (multipart): the parameter it goes in, its name, media
    type and bytes."""

    field: str
    name: str
    media_type: str
    data: bytes


class FileError(OreError):
    """A file could not be fetched (its message never holds the token)."""


class FileTooLarge(FileError):
    """A file is larger than the caller's limit; it was not (fully) read."""


class TelegramError(Refused):
    """Telegram refused a call for good: `code` (400, 401, 403, 404) and `description`;
    `migrate_to_chat_id` names the supergroup a group became."""

    def __init__(
        self, method: str, code: int, description: str, migrate_to_chat_id: int = 0
    ) -> None:
        super().__init__(f"{method}: {code} {description}", _reason(code, description))
        self.method = method
        self.code = code
        self.description = description
        self.migrate_to_chat_id = migrate_to_chat_id

    def says(self, words: str) -> bool:
        """Does the description contain `words` (case-insensitive)?"""
        return words.lower() in self.description.lower()


class FloodControl(RateLimited):
    """Telegram's 429: no call of its scope for `wait` (`retry_after`) seconds."""


def _reason(code: int, description: str) -> FailureReason:
    if code in (401, 403):
        return "refused_permission"
    if code == 413 or "too long" in description.lower():
        return "refused_too_large"
    return "refused_unsupported"


class Bucket:
    """A token bucket: `rate` per second, bursts of `burst`; time from `now`."""

    def __init__(self, rate: float, burst: float, now: Callable[[], float]) -> None:
        self.rate = rate
        self.burst = max(burst, 1.0)
        self._now = now
        self._tokens = self.burst
        self._stamp = now()

    def _refill(self) -> None:
        now = self._now()
        self._tokens = min(self.burst, self._tokens + (now - self._stamp) * self.rate)
        self._stamp = now

    def available(self) -> float:
        """Tokens there now."""
        self._refill()
        return self._tokens

    def wait_time(self) -> float:
        """Seconds until a token is there."""
        self._refill()
        return 0.0 if self._tokens >= 1 else (1 - self._tokens) / self.rate

    def take(self) -> None:
        """Take a token (the caller waited for `wait_time`)."""
        self._refill()
        self._tokens -= 1


class SlidingWindow:
    """At most `limit` sends in any `seconds`, as the receiver counts them.

    A send holds its place from `take` (before the call) until `seconds` after `done`
    (its answer came): Telegram counts a send when it arrives, which lies between the
    two, so however long each call travels no window Telegram sees holds more than
    `limit`. Same interface as `Bucket`, plus `done`.
    """

    _POLL = 0.05  # seconds between looks while every place is held by a call in flight

    def __init__(self, limit: int, seconds: float, now: Callable[[], float]) -> None:
        self.limit = max(limit, 1)
        self.seconds = seconds
        self._now = now
        self._free_at: deque[float] = deque()  # when each answered send leaves the window
        self._in_flight = 0

    def available(self) -> float:
        """Places free now."""
        now = self._now()
        while self._free_at and self._free_at[0] <= now:
            self._free_at.popleft()
        return float(self.limit - len(self._free_at) - self._in_flight)

    def wait_time(self) -> float:
        """Seconds until a place may be free."""
        if self.available() >= 1:
            return 0.0
        if not self._free_at:
            return min(self._POLL, self.seconds)
        return self._free_at[0] - self._now()

    def take(self) -> None:
        """Hold a place for a send about to go."""
        self.available()
        self._in_flight += 1

    def done(self) -> None:
        """The send's answer came (or it failed): its place frees `seconds` from now."""
        self._in_flight = max(self._in_flight - 1, 0)
        self._free_at.append(self._now() + self.seconds)


class Limits:
    """Telegram's limits as buckets: per chat, per group, overall; and pauses from 429s."""

    def __init__(
        self,
        chat_per_second: float,
        group_per_minute: float,
        overall_per_second: float,
        *,
        minute: float = 60.0,
    ) -> None:
        """`minute` is the length of the group's window in seconds (60: a test may
        shorten it); `group_per_minute` below 1 stretches the window instead."""
        self._loop = asyncio.get_running_loop()
        self.chat_rate = chat_per_second
        self.group_limit = max(math.floor(group_per_minute), 1)
        self.group_window = minute * self.group_limit / group_per_minute
        self.overall = Bucket(overall_per_second, overall_per_second, self.now)
        self._chats: dict[int, Bucket] = {}
        self._groups: dict[int, SlidingWindow] = {}
        self._paused: dict[tuple[int, str], float] = {}  # (chat or 0, scope) -> loop time

    def now(self) -> float:
        """The clock of the limits (the event loop's)."""
        return self._loop.time()

    def _buckets(self, chat: int) -> list[Bucket | SlidingWindow]:
        buckets: list[Bucket | SlidingWindow] = [self.overall]
        if chat:
            if chat not in self._chats:
                self._chats[chat] = Bucket(self.chat_rate, 1, self.now)
            buckets.append(self._chats[chat])
        if chat < 0:  # groups and supergroups have negative ids
            buckets.append(self._group(chat))
        return buckets

    def _group(self, chat: int) -> SlidingWindow:
        if chat not in self._groups:
            self._groups[chat] = SlidingWindow(self.group_limit, self.group_window, self.now)
        return self._groups[chat]

    def sent(self, chat: int) -> None:
        """A send `acquire`d for `chat` was answered (or failed): for the group's window."""
        if chat < 0:
            self._group(chat).done()

    def pause(self, chat: int, seconds: float, scope: str = "send") -> None:
        """Telegram asked for a pause (429): no call of `scope` (sends and edits, or one
        other method) for `chat` (0: for any chat) before it."""
        until = self.now() + max(seconds, 0.0)
        self._paused[(chat, scope)] = max(self._paused.get((chat, scope), 0.0), until)

    def paused_for(self, chat: int, scope: str = "send") -> float:
        """Seconds calls of `scope` for `chat` stay paused."""
        until = max(self._paused.get((chat, scope), 0.0), self._paused.get((0, scope), 0.0))
        return max(0.0, until - self.now())

    def has_room(self, chat: int, reserve: float = 1.0) -> bool:
        """Could an optional call (an intermediate edit) go now, keeping `reserve` tokens
        of the chat's group for the calls that must go?"""
        if self.paused_for(chat) > 0:
            return False
        buckets = self._buckets(chat)
        needs = [1.0, 1.0] + ([1.0 + reserve] if chat < 0 else [])
        return all(b.available() >= need for b, need in zip(buckets, needs, strict=False))

    async def unpaused(self, chat: int, scope: str) -> None:
        """Wait while calls of `scope` for `chat` are paused."""
        wait = self.paused_for(chat, scope)
        while wait > 0:
            await asyncio.sleep(wait)
            wait = self.paused_for(chat, scope)

    async def acquire(self, chat: int) -> None:
        """Wait until a send to `chat` is within every limit, and count it."""
        while True:
            wait = max([self.paused_for(chat)] + [b.wait_time() for b in self._buckets(chat)])
            if wait <= 0:
                break
            await asyncio.sleep(wait)
        for bucket in self._buckets(chat):
            bucket.take()


class BotApi:
    """The Bot API for one token, shared by every task of the conduit."""

    def __init__(self, session: aiohttp.ClientSession, base_url: str, token: str, limits: Limits):
        self.session = session
        self.base_url = base_url.rstrip("/")
        self._token = token
        self.limits = limits

    def redact(self, text: str) -> str:
        """`text` with the token replaced (URLs of files and methods contain it)."""
        return text.replace(self._token, "<token>")

    def file_url(self, file_path: str) -> str:
        """The download URL of a file (it contains the token: never log it)."""
        return f"{self.base_url}/file/bot{self._token}/{file_path}"

    async def download(self, file_id: str, limit: int) -> bytes:
        """The bytes of a file of at most `limit` bytes: `getFile`, then one GET of the
        file URL (which holds the token: it is never logged, and every error raised
        here is redacted). FileTooLarge over `limit`, FileError when not fetched."""
        try:
            info = await self.call("getFile", file_id=file_id)
        except TelegramError as exc:  # e.g. "file is too big" (over 20 MB)
            if exc.says("too big"):
                raise FileTooLarge(exc.description) from None
            raise FileError(exc.description) from None
        except PlatformError as exc:  # Telegram away or busy: the user sends it again
            raise FileError(exc.detail) from None
        path = info.get("file_path") if isinstance(info, dict) else None
        if not isinstance(path, str) or not path:
            raise FileError("getFile gave no file_path")
        size = info.get("file_size")
        if isinstance(size, int) and size > limit:
            raise FileTooLarge(f"{size} bytes")
        try:
            return await self._fetch(self.file_url(path), limit)
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise FileError(self.redact(str(exc) or type(exc).__name__)) from None

    async def _fetch(self, url: str, limit: int) -> bytes:
        timeout = aiohttp.ClientTimeout(total=_DOWNLOAD_TIMEOUT)
        async with self.session.get(url, timeout=timeout) as response:
            if response.status != 200:
                raise FileError(f"HTTP {response.status}")
            if (response.content_length or 0) > limit:
                raise FileTooLarge(f"{response.content_length} bytes")
            data = bytearray()
            async for chunk in response.content.iter_chunked(64 * 1024):
                data += chunk
                if len(data) > limit:
                    raise FileTooLarge(f"over {limit} bytes")
            return bytes(data)

    async def check(self) -> dict[str, Any]:
        """`getMe`, tried once: who the bot is. TelegramError for a refused token;
        aiohttp's errors (redacted) when Telegram cannot be reached."""
        try:
            me = await self._send("getMe", {})
        except (aiohttp.ClientError, TimeoutError, _ServerError) as exc:
            raise OreError(self.redact(str(exc) or type(exc).__name__)) from None
        return dict(me)

    async def call(self, method: str, **params: Any) -> Any:
        """Call `method` once, within the limits; its `result`. A failure is raised as
        `TelegramError`, `FloodControl` or `Transient` (see the module docstring)."""
        return await self.call_with(method, None, **params)

    async def call_with(self, method: str, upload: Upload | None, **params: Any) -> Any:
        """`call`, with a file sent as multipart (`sendPhoto`, `sendDocument`)."""
        params = {k: v for k, v in params.items() if v is not None}
        chat = _chat_of(params)
        if method in SENDS:
            await self.limits.acquire(chat)
        else:
            await self.limits.unpaused(chat, method)
        try:
            return await self._send(method, params, upload)
        except TelegramError as exc:
            if exc.code == 409:  # another getUpdates, or a webhook being removed
                raise Transient(exc.detail) from None
            raise
        except FloodControl as exc:
            log.info("telegram flood control", method=method, retry_after=exc.wait)
            self.limits.pause(chat, exc.wait, _scope(method))
            raise
        except (aiohttp.ClientError, TimeoutError, _ServerError) as exc:
            failure = self.redact(str(exc) or type(exc).__name__)
            log.info("telegram call failed", method=method, error=failure)
            raise Transient(f"{method}: {failure}") from None
        finally:
            if method in SENDS:
                self.limits.sent(chat)

    async def _send(self, method: str, params: dict[str, Any], upload: Upload | None = None) -> Any:
        url = f"{self.base_url}/bot{self._token}/{method}"
        timeout = float(params.get("timeout", 0)) + _LONG_POLL_MARGIN
        body: dict[str, Any] = {"json": params}
        if upload is not None:
            timeout = _DOWNLOAD_TIMEOUT
            form = aiohttp.FormData()
            for key, value in params.items():
                form.add_field(key, value if isinstance(value, str) else json.dumps(value))
            form.add_field(
                upload.field, upload.data, filename=upload.name, content_type=upload.media_type
            )
            body = {"data": form}
        async with self.session.post(
            url, **body, timeout=aiohttp.ClientTimeout(total=timeout)
        ) as response:
            raw = await response.read()
            if response.status >= 500:
                raise _ServerError(f"HTTP {response.status}")
        try:
            body = json.loads(raw)
        except ValueError:
            raise _ServerError(f"HTTP {response.status}: not JSON") from None
        if not isinstance(body, dict):
            raise _ServerError(f"HTTP {response.status}: not a JSON object")
        if body.get("ok") is True:
            return body.get("result")
        parameters = body.get("parameters") or {}
        code = int(body.get("error_code") or response.status)
        description = self.redact(str(body.get("description") or ""))
        if code == 429:
            wait = float(parameters.get("retry_after") or 1.0)
            raise FloodControl(f"{method}: {code} {description}", wait)
        raise TelegramError(
            method, code, description, int(parameters.get("migrate_to_chat_id") or 0)
        )


class _ServerError(Exception):
    """Telegram answered with a 5xx or garbage: the outcome is unknown."""


def _scope(method: str) -> str:
    """What a 429 of `method` pauses: every send and edit (Telegram counts them
    together), or only that method (a chat action, a draft, getUpdates)."""
    return "send" if method in SENDS else method


def _chat_of(params: dict[str, Any]) -> int:
    try:
        return int(params.get("chat_id") or 0)
    except (TypeError, ValueError):
        return 0
