"""TelegramConduit: `ore conduit telegram`.

One run: check the token with `getMe` (one line if it is missing or refused), open the
state, register the bot's commands, open the durable output feed (waiting for the core
if it is away), then take updates by long polling or on a webhook until cancelled.
Every task belongs to one TaskGroup, so cancelling `run` stops them all.
"""

from __future__ import annotations

import asyncio
import hmac
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import aiohttp
import structlog
from aiohttp import web

from ore_conduit_telegram.api import BotApi, Limits, TelegramError
from ore_conduit_telegram.config import ENV_TOKEN, MissingToken, TelegramConfig
from ore_conduit_telegram.ids import THREAD_KEY
from ore_conduit_telegram.inbound import Identity, Inbound, poll
from ore_conduit_telegram.media import MediaReader
from ore_conduit_telegram.outbound import Notes, Outbound
from ore_conduit_telegram.platform import TelegramPlatform
from ore_conduit_telegram.state import State
from ore_core import OreError
from ore_core.conduit import Conduit, ConduitClient, ConduitConfig, PlatformError
from ore_core.conduit.pacing import passes
from ore_core.conduit.waiting import until_answered
from ore_core.endpoint import KeyForm

__all__ = ["COMMANDS", "TelegramConduit"]

log = structlog.get_logger("ore.conduit.telegram")

COMMANDS = (
    ("new", "Start a new conversation"),
    ("stop", "Stop the answer being written"),
    ("help", "List the commands"),
)
"""The commands shown in Telegram's menu (`setMyCommands`)."""
_SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"


class TelegramConduit(Conduit):
    """The `telegram` conduit: see the package README.

    `on_webhook_ready` is called with the webhook's local URL once it listens (tests).
    """

    name = "telegram"
    description = (
        "Telegram (long polling or a webhook): a chat, reply chain or topic is an ore thread"
    )
    config_model = TelegramConfig
    conversation_key = THREAD_KEY
    key_form = KeyForm("CHAT:TOPIC:ROOT", "-1001234567890:0:0")
    """`Conversation.key`: TOPIC 0 outside forum topics, ROOT 0 for the chat's first
    conversation."""
    capabilities = TelegramPlatform.capabilities
    on_webhook_ready: ClassVar[Callable[[str], None] | None] = None

    async def run(self, client: ConduitClient, config: ConduitConfig) -> None:
        """Bridge Telegram until cancelled; MissingToken (one line) for a bad token."""
        if not isinstance(config, TelegramConfig):
            raise TypeError(f"the telegram conduit needs a TelegramConfig, got {config!r}")
        token = config.bot_token()
        secret = config.secret() if config.mode == "webhook" else ""
        async with aiohttp.ClientSession() as session:
            limits = Limits(
                config.chat_per_second, config.group_per_minute, config.overall_per_second
            )
            api = BotApi(session, config.api_url, token, limits)
            identity = await _check_token(api)
            state = await State.open(config.state_dir / f"state-{config.durable}.db")
            log.info("telegram conduit starting", mode=config.mode, bot=identity.username)
            try:
                await self._serve(client, config, api, identity, state, secret)
            finally:
                await state.close()

    async def _serve(
        self,
        client: ConduitClient,
        config: TelegramConfig,
        api: BotApi,
        identity: Identity,
        state: State,
        secret: str,
    ) -> None:
        ready = asyncio.Event()
        async with asyncio.TaskGroup() as tasks:
            outbound = Outbound(name=self.name, client=client, api=api, config=config, state=state)
            notes = Notes(outbound)
            inbound = Inbound(
                name=self.name,
                client=client,
                api=api,
                config=config,
                identity=identity,
                state=state,
                notes=notes,
                media=MediaReader(
                    api,
                    max_image_bytes=config.max_image_bytes,
                    max_text_bytes=config.max_text_bytes,
                ),
            )
            tasks.create_task(outbound.serve(ready), name="telegram-outbound")
            await _set_commands(api)
            await ready.wait()  # the feed exists: no answer can be missed
            await notes.flush()  # what an earlier run queued and did not send
            if config.mode == "polling":
                await _setup(api, "deleteWebhook")
                await poll(api, inbound, config)
            else:
                await _serve_webhook(api, inbound, config, secret, type(self).on_webhook_ready)


async def _check_token(api: BotApi) -> Identity:
    """Who the bot is (`getMe`); MissingToken naming the variable of a refused token."""
    try:
        me = await api.check()
    except TelegramError as exc:
        raise MissingToken(
            f"{ENV_TOKEN} was refused by Telegram (getMe: {exc.code} {exc.description}); "
            "use the token @BotFather gave you"
        ) from None
    except OreError as exc:
        raise MissingToken(f"cannot reach Telegram to check {ENV_TOKEN}: {exc}") from None
    return Identity(int(me["id"]), str(me.get("username") or ""))


async def _setup(api: BotApi, method: str, **params: Any) -> None:
    """A setup call, tried again while Telegram is away (the engine's one policy)."""
    await until_answered(lambda: api.call(method, **params), f"telegram {method}", passing=passes)


async def _set_commands(api: BotApi) -> None:
    commands = [{"command": name, "description": text} for name, text in COMMANDS]
    try:
        await _setup(api, "setMyCommands", commands=commands)
    except PlatformError as exc:
        log.info("commands not registered", error=exc.detail)


async def _serve_webhook(
    api: BotApi,
    inbound: Inbound,
    config: TelegramConfig,
    secret: str,
    ready: Callable[[str], None] | None,
) -> None:
    """Serve the webhook; an update is answered 200 only once it is handled (else
    Telegram sends it again), and only with the right secret header."""

    async def handle(request: web.Request) -> web.Response:
        given = request.headers.get(_SECRET_HEADER, "")
        if not hmac.compare_digest(given.encode(), secret.encode()):
            log.warning("webhook call with a wrong secret refused", peer=request.remote)
            return web.json_response({"error": "wrong secret token"}, status=401)
        try:
            update: Any = await request.json()
        except ValueError:
            return web.json_response({"error": "the body is not JSON"}, status=400)
        if not isinstance(update, Mapping) or not isinstance(update.get("update_id"), int):
            return web.json_response({"error": "not a Telegram update"}, status=400)
        await inbound.take(update)
        return web.json_response({})

    app = web.Application(client_max_size=1024 * 1024)
    app.router.add_post(config.listen_path, handle)
    runner = web.AppRunner(app, handle_signals=False)
    await runner.setup()
    try:
        await web.TCPSite(runner, config.listen_host, config.listen_port).start()
        port = int(runner.addresses[0][1])
        local = f"http://{config.listen_host}:{port}{config.listen_path}"
        await _setup(
            api,
            "setWebhook",
            url=config.webhook_url or local,
            secret_token=secret,
            allowed_updates=["message", "edited_message"],
        )
        log.info("telegram webhook listening", url=local)
        if ready is not None:
            ready(local)
        await asyncio.Event().wait()  # until cancelled
    finally:
        await asyncio.shield(runner.cleanup())
