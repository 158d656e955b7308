"""Discord's REST API through hikari, every failure classified once.

hikari keeps the per-route buckets from the `X-RateLimit-*` headers and waits out a
short one itself; a wait longer than `WAIT_INSIDE` (a bucket that is empty for a
while, or a 429's `retry_after`) comes back as `RateLimited(wait)`, so the engine waits
that conversation alone and reports it. hikari retries nothing else (`max_retries=0`):
a 5xx or a dropped connection is `Transient`, and the engine's one retry policy
decides. Every post asks Discord for no mentions, so relayed text never pings anyone.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any, TypeVar

import aiohttp
import hikari

from ore_conduit_discord.config import MissingToken, Webhook
from ore_core.conduit import Part, RateLimited, Refused, Transient

__all__ = ["COMMANDS", "DiscordRest", "classify"]

WAIT_INSIDE = 1.0
"""Longest rate-limit wait hikari sits out itself; longer ones go to the engine."""
COMMANDS = {
    "new": "Start a new conversation in this channel",
    "stop": "Stop the answer being written",
}
"""The core's commands offered as slash commands."""
_TOO_LONG = "BASE_TYPE_MAX_LENGTH"
_UNKNOWN_MESSAGE = 10008
_QUIET: dict[str, Any] = {"mentions_everyone": False, "user_mentions": False, "role_mentions": False}
T = TypeVar("T")


def classify(exc: BaseException) -> Exception:
    """The contract's failure class for a hikari or connection error."""
    if isinstance(exc, hikari.RateLimitTooLongError):
        return RateLimited(f"Discord rate limit on {exc.route}", wait=exc.retry_after)
    if isinstance(exc, hikari.InternalServerError):
        return Transient(f"Discord answered {exc.status}")
    if isinstance(exc, hikari.BadRequestError):
        reason = "refused_too_large" if _TOO_LONG in str(exc.errors) else "refused_unsupported"
        return Refused(f"Discord refused the message: {exc.message}", reason)
    if isinstance(exc, hikari.NotFoundError) and exc.code == _UNKNOWN_MESSAGE:
        return Refused("the message is gone (Unknown Message)", "refused_unsupported")
    if isinstance(exc, hikari.ClientHTTPResponseError):
        return Refused(f"Discord refused ({exc.status} {exc.message})", "refused_permission")
    if isinstance(exc, (hikari.HTTPError, aiohttp.ClientError, ConnectionError, TimeoutError)):
        return Transient(f"Discord unreachable: {exc}")
    return exc if isinstance(exc, Exception) else RuntimeError(str(exc))


async def _classified(call: Awaitable[T]) -> T:
    try:
        return await call
    except (hikari.HikariError, aiohttp.ClientError, ConnectionError, TimeoutError) as exc:
        raise classify(exc) from exc


class DiscordRest:
    """The few REST calls the conduit makes, on one hikari client."""

    def __init__(self, api_url: str, token: str) -> None:
        self._app = hikari.RESTApp(url=api_url, max_rate_limit=WAIT_INSIDE, max_retries=0)
        self._token = token
        self.client: hikari.impl.RESTClientImpl | None = None

    async def start(self) -> hikari.OwnUser:
        """Log in: the bot's own user; MissingToken (one line) if Discord refuses the token."""
        await self._app.start()
        self.client = self._app.acquire(self._token, hikari.TokenType.BOT)
        self.client.start()
        try:
            return await self.client.fetch_my_user()
        except hikari.UnauthorizedError as exc:
            raise MissingToken(
                "Discord refused the bot token (401): copy it again from the developer portal"
            ) from exc

    async def close(self) -> None:
        if self.client is not None:
            await self.client.close()
        await self._app.close()

    @property
    def rest(self) -> hikari.impl.RESTClientImpl:
        assert self.client is not None, "DiscordRest.start() first"
        return self.client

    async def gateway_url(self) -> str:
        return (await _classified(self.rest.fetch_gateway_bot_info())).url

    async def register_commands(self, application: int) -> None:
        builders = [self.rest.slash_command_builder(name, text) for name, text in COMMANDS.items()]
        await _classified(self.rest.set_application_commands(application, builders))

    async def post(self, channel: int, part: Part, key: str) -> str:
        reply = int(part.reply_to) if part.reply_to else hikari.UNDEFINED
        message = await _classified(
            self.rest.create_message(channel, part.text, nonce=key, reply=reply,
                                     reply_must_exist=False, **_QUIET)  # fmt: skip
        )
        return str(message.id)

    async def edit(self, channel: int, message: int, text: str) -> None:
        await _classified(self.rest.edit_message(channel, message, text, **_QUIET))

    async def delete(self, channel: int, message: int) -> None:
        await _classified(self.rest.delete_message(channel, message))

    async def post_as(self, hook: Webhook, thread: int | None, part: Part) -> str:
        """Post through a webhook, showing the part's sender (name, avatar)."""
        sender = part.sender
        assert sender is not None
        message = await _classified(
            self.rest.execute_webhook(
                hook.id, hook.token, part.text, thread=thread or hikari.UNDEFINED,
                username=sender.name[:80] or hikari.UNDEFINED,
                avatar_url=sender.avatar or hikari.UNDEFINED, **_QUIET,
            )
        )  # fmt: skip
        return str(message.id)

    async def edit_as(self, hook: Webhook, thread: int | None, message: int, text: str) -> None:
        await _classified(
            self.rest.edit_webhook_message(hook.id, hook.token, message, text,
                                           thread=thread or hikari.UNDEFINED, **_QUIET)  # fmt: skip
        )

    async def answer_command(self, interaction: str, token: str, text: str) -> None:
        """Answer a slash command (only its user sees it), as Discord needs within 3 s."""
        await _classified(
            self.rest.create_interaction_response(
                int(interaction), token, hikari.ResponseType.MESSAGE_CREATE, text,
                flags=hikari.MessageFlag.EPHEMERAL,
            )
        )  # fmt: skip
