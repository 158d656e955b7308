"""SlackConduit: `ore conduit slack`.

One run: check the bot token with `auth.test` (and the app token or signing secret
for the chosen mode), open the inbox, build one Bolt `AsyncApp` whose listeners hand
events to `Inbound` before they are acknowledged, queue what the inbox still holds, and
serve Slack over Socket Mode or HTTP until cancelled. The durable output feed opens
beside it (waiting for the core if it is away: Slack is served meanwhile, its events
wait in the inbox) and its events go through `Outbound`. Every task belongs to one
TaskGroup, so cancelling `run` stops them all.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar

import structlog
from aiohttp import web
from slack_bolt.adapter.socket_mode.aiohttp import AsyncSocketModeHandler
from slack_bolt.app.async_app import AsyncApp
from slack_bolt.context.ack.async_ack import AsyncAck
from slack_bolt.logger.messages import warning_client_prioritized_and_token_skipped
from slack_sdk.web.async_client import AsyncWebClient

from ore_conduit_slack.api import Ambiguous, SlackApi, SlackError
from ore_conduit_slack.config import ENV_APP_TOKEN, ENV_BOT_TOKEN, MissingSecret, SlackConfig
from ore_conduit_slack.ids import THREAD_KEY
from ore_conduit_slack.inbound import Identity, Inbound, Lanes
from ore_conduit_slack.inbox import Inbox
from ore_conduit_slack.outbound import Clock, Outbound
from ore_conduit_slack.shortcut import REGENERATE
from ore_core.conduit import Conduit, ConduitClient, ConduitConfig
from ore_core.endpoint import KeyForm

__all__ = ["MonotonicClock", "SlackConduit"]

log = structlog.get_logger("ore.conduit.slack")

_EVENTS = ("app_mention", "message")
_ACKNOWLEDGED = ("assistant_thread_started", "assistant_thread_context_changed")


class MonotonicClock:
    """The real clock of stream ages."""

    def now(self) -> float:
        """Seconds of `time.monotonic`."""
        return time.monotonic()


class SlackConduit(Conduit):
    """The `slack` conduit: see the package README.

    `clock` is where stream ages are read; tests set a fake one on a subclass.
    `on_http_ready` is called with the HTTP mode's base URL once it listens.
    """

    name = "slack"
    description = "Slack (Socket Mode or the Events API): a Slack thread is an ore thread"
    config_model = SlackConfig
    conversation_key = THREAD_KEY
    key_form = KeyForm("ENTERPRISE:TEAM:CHANNEL:THREAD_TS", "-:T0123:C0123:1712.0001")
    """`SlackThread.key`: ENTERPRISE is `-` outside Enterprise Grid."""
    clock: ClassVar[Clock] = MonotonicClock()
    on_http_ready: ClassVar[Callable[[str], None] | None] = None

    async def run(self, client: ConduitClient, config: ConduitConfig) -> None:
        """Bridge Slack until cancelled; MissingSecret (one line) for a bad token."""
        if not isinstance(config, SlackConfig):
            raise TypeError(f"the slack conduit needs a SlackConfig, got {config!r}")
        bot_token = config.secret("bot_token")
        app_token = config.secret("app_token") if config.mode == "socket" else ""
        if config.mode == "http":
            config.secret("signing_secret")  # missing: said before anything starts
        web_client = AsyncWebClient(token=bot_token, base_url=config.api_url, retry_handlers=[])
        api = SlackApi(web_client)
        identity = await _check_tokens(api, app_token)
        inbox = await Inbox.open(config.state_dir / f"inbox-{config.durable}.db")
        log.info("slack conduit starting", mode=config.mode, team=identity.team_id)
        try:
            await self._serve(client, config, api, identity, inbox)
        finally:
            await inbox.close()

    async def _serve(
        self,
        client: ConduitClient,
        config: SlackConfig,
        api: SlackApi,
        identity: Identity,
        inbox: Inbox,
    ) -> None:
        app_token = config.secret("app_token") if config.mode == "socket" else ""
        signing_secret = config.secret("signing_secret") if config.mode == "http" else ""
        feed_ready = asyncio.Event()
        async with asyncio.TaskGroup() as tasks:
            outbound = Outbound(
                name=self.name,
                client=client,
                api=api,
                config=config,
                identity=identity,
                clock=self.clock,
            )
            inbound = Inbound(
                name=self.name,
                client=client,
                api=api,
                config=config,
                identity=identity,
                lanes=Lanes(tasks),
                answering=outbound.answering,
                inbox=inbox,
                ready=feed_ready,
            )
            app = _bolt_app(api.client, inbound, signing_secret, config.mode)
            tasks.create_task(outbound.serve(feed_ready), name="slack-outbound")
            await inbound.replay()  # before new events: a thread's messages stay in order
            if config.mode == "socket":
                await _serve_socket_mode(app, app_token, config)
            else:
                await _serve_http(app, config, type(self).on_http_ready)


async def _check_tokens(api: SlackApi, app_token: str) -> Identity:
    """Who the bot is (`auth.test`); MissingSecret naming the variable of a refused token."""
    try:
        me = await api.call("auth.test")
    except SlackError as exc:
        raise MissingSecret(
            f"{ENV_BOT_TOKEN} was refused by Slack (auth.test: {exc.error}); "
            "use the app's Bot User OAuth Token (xoxb-...)"
        ) from None
    except Ambiguous as exc:
        raise MissingSecret(f"cannot reach Slack to check {ENV_BOT_TOKEN}: {exc}") from None
    if app_token:
        try:
            await api.client.apps_connections_open(app_token=app_token)
        except Exception as exc:  # the SDK raises SlackApiError or a client error
            error = getattr(getattr(exc, "response", None), "data", {}) or {}
            code = error.get("error", type(exc).__name__) if isinstance(error, dict) else exc
            raise MissingSecret(
                f"{ENV_APP_TOKEN} was refused by Slack (apps.connections.open: {code}); "
                "use an app-level token (xapp-...) with connections:write"
            ) from None
    return Identity(str(me["user_id"]), str(me.get("bot_id") or ""), str(me["team_id"]))


class _SameTokenNotice(logging.Filter):
    """Drops Bolt's "As you gave `client` as well, `token` will be unused." at every start.

    Bolt reads SLACK_BOT_TOKEN by itself even when handed a client; the client holds
    that same token, so the notice says nothing to act on.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() != warning_client_prioritized_and_token_skipped()


def _bolt_app(
    web_client: AsyncWebClient, inbound: Inbound, signing_secret: str, mode: str
) -> AsyncApp:
    """One Bolt app for both modes; its listeners hand events to `inbound` and Bolt
    acknowledges each once its listener returned (`process_before_response`): an event
    is acknowledged only once the inbox keeps it. The listener takes one local SQLite
    commit, far inside Slack's 3 seconds; if it fails, Slack sends the event again."""
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
        await inbound.take(body)

    async def acknowledge_only(body: dict[str, Any]) -> None:
        """Events of the AI-app split view that need no answer (no warning logged)."""

    async def shortcut(ack: AsyncAck, body: dict[str, Any]) -> None:
        """Kept (the inbox) before it is acknowledged, as an event is."""
        await inbound.take(body)
        await ack()

    for event in _EVENTS:
        app.event(event)(listener)
    app.message_shortcut(REGENERATE)(shortcut)
    for event in _ACKNOWLEDGED:
        app.event(event)(acknowledge_only)
    return app


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
