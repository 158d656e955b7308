"""Slack's event transports: one Bolt app served over Socket Mode or the Events API.

The app's listeners hand every event to `take` and Bolt acknowledges it once the
listener returned (`process_before_response`): an event is acknowledged only once the
inbox keeps it (one local SQLite commit, far inside Slack's 3 seconds); if that fails,
Slack sends the event again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import structlog
from aiohttp import web
from slack_bolt.adapter.socket_mode.aiohttp import AsyncSocketModeHandler
from slack_bolt.app.async_app import AsyncApp
from slack_bolt.context.ack.async_ack import AsyncAck
from slack_bolt.logger.messages import warning_client_prioritized_and_token_skipped
from slack_sdk.web.async_client import AsyncWebClient

from ore_conduit_slack.config import SlackConfig
from ore_conduit_slack.shortcut import REGENERATE

__all__ = ["bolt_app", "serve"]

log = structlog.get_logger("ore.conduit.slack")

_EVENTS = ("app_mention", "message", "reaction_added", "reaction_removed")
_ACKNOWLEDGED = ("assistant_thread_started", "assistant_thread_context_changed")

Take = Callable[[dict[str, Any]], Awaitable[None]]


class _SameTokenNotice(logging.Filter):
    """Drops Bolt's "As you gave `client` as well, `token` will be unused." at every start.

    Bolt reads SLACK_BOT_TOKEN by itself even when handed a client; the client holds
    that same token, so the notice says nothing to act on.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() != warning_client_prioritized_and_token_skipped()


def bolt_app(web_client: AsyncWebClient, take: Take, signing_secret: str, mode: str) -> AsyncApp:
    """One Bolt app for both modes, its listeners handing events to `take`."""
    bolt_log = logging.getLogger("ore.conduit.slack.bolt")
    if not any(isinstance(f, _SameTokenNotice) for f in bolt_log.filters):
        bolt_log.addFilter(_SameTokenNotice())
    app = AsyncApp(
        client=web_client,
        signing_secret=signing_secret or "socket-mode-has-no-signing-secret",
        request_verification_enabled=mode == "http",
        process_before_response=True,
        logger=bolt_log,
    )

    async def listener(body: dict[str, Any]) -> None:
        await take(body)

    async def acknowledge_only(body: dict[str, Any]) -> None:
        """Events of the AI-app split view that need no answer (no warning logged)."""

    async def shortcut(ack: AsyncAck, body: dict[str, Any]) -> None:
        """Kept (the inbox) before it is acknowledged, as an event is."""
        await take(body)
        await ack()

    for event in _EVENTS:
        app.event(event)(listener)
    app.message_shortcut(REGENERATE)(shortcut)
    for event in _ACKNOWLEDGED:
        app.event(event)(acknowledge_only)
    return app


async def serve(
    app: AsyncApp, config: SlackConfig, ready: Callable[[str], None] | None = None
) -> None:
    """Serve Slack's events to `app` until cancelled, as `config.mode` says (`ready` is
    called with the HTTP mode's URL once it listens)."""
    if config.mode == "socket":
        await _serve_socket_mode(app, config.secret("app_token"), config)
    else:
        await _serve_http(app, config, ready)


async def _serve_socket_mode(app: AsyncApp, app_token: str, config: SlackConfig) -> None:
    handler = AsyncSocketModeHandler(app, app_token, ping_interval=config.ping_interval)
    try:
        connect: Callable[[], Awaitable[None]] = handler.connect_async  # untyped in Bolt
        await connect()
        await asyncio.Event().wait()  # until cancelled
    finally:
        await asyncio.shield(_close(handler.client.close))


async def _serve_http(
    app: AsyncApp, config: SlackConfig, ready: Callable[[str], None] | None
) -> None:
    runner = web.AppRunner(app.web_app(path=config.http_path), handle_signals=False)
    await runner.setup()
    try:
        await web.TCPSite(runner, config.http_host, config.http_port).start()
        port = int(runner.addresses[0][1])
        url = f"http://{config.http_host}:{port}{config.http_path}"
        log.info("slack events endpoint listening", url=url)
        if ready is not None:
            ready(url)
        await asyncio.Event().wait()  # until cancelled
    finally:
        await asyncio.shield(runner.cleanup())


async def _close(close: Callable[[], Awaitable[None]]) -> None:
    try:
        await close()
    except Exception as exc:  # closing a half-open socket may fail; nothing to undo
        log.debug("socket mode close failed", error=str(exc))
