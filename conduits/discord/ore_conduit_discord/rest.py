"""Discord's REST API: the few calls the conduit makes, every failure classified once.

A small aiohttp client rather than hikari's (see the README): the engine must learn
Discord's own wait. A 429 is `RateLimited(retry_after)` as Discord's body says it; a
bucket the `X-RateLimit-*` headers show empty (per route and channel, as Discord counts
them) is waited out here when it refills within `WAIT_INSIDE`, else `RateLimited` with
the time to its reset, before any request is made. Nothing is retried here: a 5xx or a
dropped connection is `Transient` and the engine's one retry policy decides. Every post
asks for no mentions, so relayed text never pings anyone.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from typing import Any
from urllib.parse import quote

import aiohttp

from ore_conduit_discord.config import MissingToken, Webhook
from ore_core.artifacts import Attachment
from ore_core.conduit import FailureReason, Part, PlatformError, RateLimited, Refused, Transient

__all__ = ["COMMANDS", "DiscordRest", "check_token", "classify"]

Files = Sequence[tuple[Attachment, bytes]]
"""Files a post carries: each attachment and its bytes."""

WAIT_INSIDE = 1.0
"""Longest wait for a bucket to refill sat out here; longer ones go to the engine."""
COMMANDS = {
    "new": "Start a new thread (the core's /new)",
    "stop": "Stop the answer being written",
}
"""The core's commands offered as slash commands."""
_TOO_LONG = "BASE_TYPE_MAX_LENGTH"
_UNKNOWN_MESSAGE = 10008
_QUIET: dict[str, Any] = {"allowed_mentions": {"parse": []}}
_TIMEOUT = aiohttp.ClientTimeout(total=30)


async def check_token(api_url: str, token: str) -> None:
    """MissingToken (one line) if Discord refuses `token`; any other failure is left to
    the connection that follows."""
    rest = DiscordRest(api_url, token)
    try:
        await rest.start()
    except PlatformError:
        pass
    finally:
        await rest.close()


def classify(status: int, body: dict[str, Any]) -> PlatformError:
    """The contract's failure class for an answer of Discord's that is not a success."""
    message = str(body.get("message", ""))
    if status == 429:
        return RateLimited(
            f"Discord rate limit: {message}", wait=float(body.get("retry_after", 1.0))
        )
    if status >= 500:
        return Transient(f"Discord answered {status}")
    if status == 400:
        too_long = _TOO_LONG in str(body.get("errors", ""))
        reason: FailureReason = "refused_too_large" if too_long else "refused_unsupported"
        return Refused(f"Discord refused the message: {message} ({body.get('code')})", reason)
    if status == 404 and body.get("code") == _UNKNOWN_MESSAGE:
        return Refused("the message is gone (Unknown Message)", "refused_unsupported")
    return Refused(f"Discord refused ({status} {message})", "refused_permission")


class DiscordRest:
    """One aiohttp session against `api_url`, with Discord's rate-limit buckets."""

    def __init__(self, api_url: str, token: str) -> None:
        self._base = api_url.rstrip("/")
        self._token = token
        self._http: aiohttp.ClientSession | None = None
        self._buckets: dict[str, str] = {}  # route -> Discord's bucket
        self._refills: dict[tuple[str, str], float] = {}  # (bucket, channel) -> refill time

    async def start(self) -> dict[str, Any]:
        """Log in: the bot's own user; MissingToken (one line) if Discord refuses the token."""
        self._http = aiohttp.ClientSession(timeout=_TIMEOUT)
        try:
            return await self._call("GET", "/users/@me")
        except Refused as exc:
            if "401" in exc.detail:
                raise MissingToken(
                    "Discord refused the bot token (401): copy it again from "
                    "the developer portal's Bot page"
                ) from exc
            raise

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()

    async def gateway_url(self) -> str:
        return str((await self._call("GET", "/gateway/bot"))["url"])

    async def register_commands(self, application: str) -> None:
        commands = [
            {"name": name, "description": text, "type": 1} for name, text in COMMANDS.items()
        ]
        await self._call("PUT", f"/applications/{application}/commands", json=commands)

    async def post(self, channel: str, part: Part, key: str, files: Files = ()) -> str:
        """Post `part` (with `files`, its attachments' bytes, as a multipart upload) under
        the nonce `key`: Discord answers a repeated nonce with the message it made."""
        body: dict[str, Any] = {"content": part.text, "nonce": key, "enforce_nonce": True, **_QUIET}
        if part.reply_to:
            body["message_reference"] = {"message_id": part.reply_to, "fail_if_not_exists": False}
        made = await self._call(
            "POST", f"/channels/{channel}/messages", channel, **_body(body, files)
        )
        if made.get("content", part.text) != part.text:
            # The nonce's message, made before a crash with the part's text of then (the
            # start of a streamed answer): Discord answers it as it is; show the text now.
            await self.edit(channel, str(made["id"]), part.text)
        return str(made["id"])

    async def edit(self, channel: str, message: str, text: str) -> None:
        body = {"content": text, **_QUIET}
        await self._call("PATCH", f"/channels/{channel}/messages/{message}", channel, json=body)

    async def delete(self, channel: str, message: str) -> None:
        await self._call("DELETE", f"/channels/{channel}/messages/{message}", channel)

    async def react(self, channel: str, message: str, emoji: str, add: bool) -> None:
        """The bot's own reaction on `message`, added (PUT) or taken back (DELETE); both
        are idempotent on Discord. `emoji` is a Unicode emoji or a custom `name:id`."""
        path = f"/channels/{channel}/messages/{message}/reactions/{quote(emoji, safe=':')}/@me"
        await self._call("PUT" if add else "DELETE", path, channel)

    async def post_as(self, hook: Webhook, thread: str, part: Part, files: Files = ()) -> str:
        """Post through a webhook, showing the part's sender (name, avatar). Webhooks
        take no nonce: see the README on what a crash can double here."""
        sender = part.sender
        assert sender is not None
        body: dict[str, Any] = {"content": part.text, "username": sender.name[:80], **_QUIET}
        if sender.avatar:
            body["avatar_url"] = sender.avatar
        query = {"wait": "true"} | ({"thread_id": thread} if thread else {})
        path = f"/webhooks/{hook.id}/{hook.token}"
        made = await self._call("POST", path, str(hook.id), params=query, **_body(body, files))
        return str(made["id"])

    async def edit_as(self, hook: Webhook, thread: str, message: str, text: str) -> None:
        query = {"thread_id": thread} if thread else {}
        path = f"/webhooks/{hook.id}/{hook.token}/messages/{message}"
        await self._call(
            "PATCH", path, str(hook.id), json={"content": text, **_QUIET}, params=query
        )

    async def answer_command(self, interaction: str, token: str, text: str) -> None:
        """Answer a slash command (only its user sees it), as Discord needs within 3 s."""
        body = {"type": 4, "data": {"content": text, "flags": 64}}
        await self._call("POST", f"/interactions/{interaction}/{token}/callback", json=body)

    async def _call(
        self, method: str, path: str, channel: str = "", **request: Any
    ) -> dict[str, Any]:
        assert self._http is not None, "DiscordRest.start() first"
        route = f"{method} {_template(path)}"
        await self._wait_for_bucket(route, channel)
        headers = {"Authorization": f"Bot {self._token}"}
        try:
            async with self._http.request(
                method, self._base + path, headers=headers, **request
            ) as answer:
                self._note_bucket(route, channel, answer.headers)
                body = await answer.json() if answer.content_type == "application/json" else {}
                status = answer.status
        except (aiohttp.ClientError, ConnectionError, TimeoutError) as exc:
            raise Transient(f"Discord unreachable: {exc or type(exc).__name__}") from exc
        if status >= 300:
            raise classify(status, body if isinstance(body, dict) else {})
        return body if isinstance(body, dict) else {"items": body}

    async def _wait_for_bucket(self, route: str, channel: str) -> None:
        bucket = self._buckets.get(route)
        refill = self._refills.get((bucket, channel), 0.0) if bucket else 0.0
        wait = refill - time.monotonic()
        if wait > WAIT_INSIDE:
            raise RateLimited(f"Discord bucket {bucket} is empty", wait=wait)
        if wait > 0:
            await asyncio.sleep(wait)

    def _note_bucket(self, route: str, channel: str, headers: Any) -> None:
        bucket = headers.get("X-RateLimit-Bucket")
        if not bucket:
            return
        self._buckets[route] = bucket
        if headers.get("X-RateLimit-Remaining") == "0":
            reset_after = float(headers.get("X-RateLimit-Reset-After", "0"))
            self._refills[(bucket, channel)] = time.monotonic() + reset_after
        else:
            self._refills.pop((bucket, channel), None)


def _body(body: dict[str, Any], files: Files) -> dict[str, Any]:
    """The request's body: JSON, or with files Discord's multipart form (`payload_json`
    and `files[n]`, each named in `attachments`)."""
    if not files:
        return {"json": body}
    form = aiohttp.FormData()
    described = [{"id": n, "filename": a.name} for n, (a, _) in enumerate(files)]
    form.add_field("payload_json", json.dumps({**body, "attachments": described}))
    for n, (attachment, data) in enumerate(files):
        form.add_field(
            f"files[{n}]", data, filename=attachment.name, content_type=attachment.media_type
        )
    return {"data": form}


def _template(path: str) -> str:
    """The route of `path` as Discord counts its buckets: ids replaced by a placeholder."""
    return "/".join("{id}" if piece.isdigit() else piece for piece in path.split("/"))
