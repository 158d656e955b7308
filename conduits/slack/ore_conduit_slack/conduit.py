"""SlackConduit: `ore conduit slack`, the engine around `SlackPlatform`.

The engine carries Slack's events to the core (one lane per Slack thread, each event
leaving the inbox once the core has it) and the core's output to Slack: another
endpoint's copies through its copy engine, the conduit's own answers through Slack's
renderer (`outbound`: native streams, the assistant status, the reply record), each
thread's lane. What is Slack's own is in the hooks below: which threads are the bot's
(`admit`), the sender's display name, the interrupt before a delete of a message
whose answer is being written, the files a message shares (fetched into ore, a notice
for each not taken), the turn of the bot's message a reaction is on (an answer or a
copy: `shortcut.regenerated_turn`) and the regenerate shortcut (`forward`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import ClassVar

import structlog
from slack_sdk.web.async_client import AsyncWebClient

from ore_conduit_slack.api import Ambiguous, SlackApi, SlackError
from ore_conduit_slack.config import ENV_APP_TOKEN, ENV_BOT_TOKEN, MissingSecret, SlackConfig
from ore_conduit_slack.ids import THREAD_KEY, SlackThread, message_of, traceparent_of
from ore_conduit_slack.inbound import Regenerate, SlackMessage
from ore_conduit_slack.outbound import OUTPUT_KINDS, Clock, Rendering, ThreadRenderer
from ore_conduit_slack.platform import SlackPlatform
from ore_conduit_slack.shortcut import regenerated_turn
from ore_core.conduit import (
    Capabilities,
    ConduitClient,
    ConduitConfig,
    Delete,
    Edit,
    Engine,
    Inbound,
    Lane,
    Message,
    Platform,
    PlatformConduit,
    PlatformContext,
    Reaction,
    Sender,
    until_answered,
)
from ore_core.conduit.answering import Outbound
from ore_core.endpoint import KeyForm

__all__ = ["MonotonicClock", "SlackConduit"]

log = structlog.get_logger("ore.conduit.slack")


class MonotonicClock:
    """The real clock of stream ages."""

    def now(self) -> float:
        """Seconds of `time.monotonic`."""
        return time.monotonic()


class SlackConduit(PlatformConduit):
    """The `slack` conduit: see the package README.

    `clock` is where stream ages are read; tests set a fake one on a subclass.
    `on_http_ready` is called with the HTTP mode's base URL once it listens.
    """

    name = "slack"
    description = "Slack (Socket Mode or the Events API): a Slack thread is an ore thread"
    config_model = SlackConfig
    capabilities = SlackPlatform.capabilities
    conversation_key = THREAD_KEY
    key_form = KeyForm("ENTERPRISE:TEAM:CHANNEL:THREAD_TS", "-:T0123:C0123:1712.0001")
    """`SlackThread.key`: ENTERPRISE is `-` outside Enterprise Grid."""
    connect_first = True  # Slack's events are kept in the inbox while the core is away
    clock: ClassVar[Clock] = MonotonicClock()
    on_http_ready: ClassVar[Callable[[str], None] | None] = None

    async def run(self, client: ConduitClient, config: ConduitConfig) -> None:
        """Check the tokens first (MissingSecret, one line, for a bad one): the engine
        opens its feed, which waits for the core, before it connects the adapter."""
        settings = _settings(config)
        await check_tokens(settings)
        log.info("slack conduit starting", mode=settings.mode)
        await super().run(client, config)

    def platform(self, config: ConduitConfig, context: PlatformContext) -> SlackPlatform:
        return SlackPlatform(_settings(config), context, type(self).on_http_ready)

    def platform_capabilities(self, platform: Platform, config: ConduitConfig) -> Capabilities:
        """The longest message is the setting `message_chars`."""
        update = {"max_message_length": _settings(config).message_chars}
        return SlackPlatform.capabilities.model_copy(update=update)

    def feed_kinds(self, config: ConduitConfig) -> frozenset[str]:
        return OUTPUT_KINDS

    def lane(self, engine: Engine, thread_id: str, outbound: Outbound) -> Lane:
        """Slack's renderer shows the thread's answers; copies go to the engine's."""
        slack = _adapter(engine)
        if slack.rendering is None:
            slack.rendering = Rendering(
                name=self.name,
                client=engine.client,
                api=slack.api,
                config=slack.config,
                identity=slack.identity,
                clock=type(self).clock,
                copies=engine.copies,
            )
        return ThreadRenderer(slack.rendering, thread_id, outbound.conversations)

    def traceparent(self, inbound: Inbound) -> str:
        """A trace named by the event id alone: an answer is tied back to its message
        after a restart (its trace id), with no state."""
        return traceparent_of(inbound.platform_id)

    async def admit(self, engine: Engine, inbound: Inbound) -> bool:
        """Only what happens in the bot's threads (asked of Slack, waited out while it
        is away or throttling)."""
        slack = _adapter(engine)
        return await engine.pacing.call(
            inbound.conversation, lambda: slack.decoder.owns(inbound), deadline=math.inf
        )

    async def forward(self, engine: Engine, thread_id: str, inbound: Inbound) -> None:
        """The event with its sender's display name, sent while the core is away for as
        long as it takes (it is in the inbox meanwhile); a delete of a message whose
        answer is being written interrupts it first."""
        slack = _adapter(engine)
        if isinstance(inbound, Message | Edit | Regenerate | Reaction) and inbound.sender.id:
            team = SlackThread.parse(inbound.conversation).team
            name = await slack.names.name(team, inbound.sender.id)
            inbound = replace(inbound, sender=Sender(name, id=inbound.sender.id))
        if isinstance(inbound, SlackMessage) and inbound.files:
            taken = await slack.files.take(inbound.files)
            for notice in taken.notices:
                await until_answered(
                    partial(slack.say, inbound.conversation, notice), "a slack notice waits"
                )
            inbound = replace(inbound, files=(), attachments=tuple(taken.attachments))
            if not inbound.text and not inbound.attachments:
                return  # files alone, none taken: the notices say so
        if isinstance(inbound, Delete) and slack.running(inbound.target):
            await until_answered(lambda: engine.client.interrupt(thread_id), "interrupt waits")
        if isinstance(inbound, Regenerate):
            await self._regenerate(engine, slack, thread_id, inbound)
            return
        if isinstance(inbound, Reaction) and message_of(inbound.target) is None:
            reaction = inbound
            turn = await until_answered(
                lambda: self._turn_of_own(engine, slack, thread_id, reaction),
                "a slack reaction waits for the core",
            )
            if turn is None:
                log.info("reaction on a bot message ore has no turn for", thread_id=thread_id)
                return
            inbound = replace(inbound, target=turn)
        await until_answered(
            lambda: engine.forward(thread_id, inbound), "a slack event waits for the core"
        )
        slack.forwarded(inbound)

    @staticmethod
    async def _turn_of_own(
        engine: Engine, slack: SlackPlatform, thread_id: str, reaction: Reaction
    ) -> str | None:
        """The turn the bot's message `reaction.target` (a `ts`) shows: a part this run
        posted, else the answer or copy its metadata names."""
        found = await engine.posted.lookup(reaction.target)
        if found is not None:
            return found[1]
        message = {"ts": reaction.target, "user": slack.identity.user_id}
        thread = SlackThread.parse(reaction.conversation)
        return await regenerated_turn(
            engine.client, slack.api, slack.identity, thread, thread_id, message, ""
        )

    async def _regenerate(
        self, engine: Engine, slack: SlackPlatform, thread_id: str, inbound: Regenerate
    ) -> None:
        thread = SlackThread.parse(inbound.conversation)
        turn = await regenerated_turn(
            engine.client,
            slack.api,
            slack.identity,
            thread,
            thread_id,
            inbound.message,
            inbound.asked_on,
        )
        if turn is None:
            log.info("regenerate shortcut on a message ore has no turn for", thread=thread.key)
            return
        sender = inbound.sender
        context = engine.forwarder.context(
            sender.id, sender.name, traceparent_of(inbound.platform_id)
        )
        await until_answered(
            lambda: engine.client.regenerate(
                thread_id, turn, id=inbound.platform_id, context=context
            ),
            "a regenerate waits for the core",
        )


def _settings(config: ConduitConfig) -> SlackConfig:
    if not isinstance(config, SlackConfig):
        raise TypeError(f"the slack conduit needs a SlackConfig, got {config!r}")
    return config


def _adapter(engine: Engine) -> SlackPlatform:
    assert isinstance(engine.platform, SlackPlatform)
    return engine.platform


async def check_tokens(config: SlackConfig) -> None:
    """The tokens of the mode, asked of Slack (`auth.test`, `apps.connections.open`);
    MissingSecret naming the variable of a missing or refused one."""
    bot_token = config.secret("bot_token")
    app_token = config.secret("app_token") if config.mode == "socket" else ""
    if config.mode == "http":
        config.secret("signing_secret")  # missing: said before anything starts
    web_client = AsyncWebClient(token=bot_token, base_url=config.api_url, retry_handlers=[])
    try:
        await SlackApi(web_client).call("auth.test")
    except SlackError as exc:
        raise MissingSecret(
            f"{ENV_BOT_TOKEN} was refused by Slack (auth.test: {exc.error}); "
            "use the app's Bot User OAuth Token (xoxb-...)"
        ) from None
    except Ambiguous as exc:
        raise MissingSecret(f"cannot reach Slack to check {ENV_BOT_TOKEN}: {exc}") from None
    if app_token:
        try:
            await web_client.apps_connections_open(app_token=app_token)
        except Exception as exc:  # the SDK raises SlackApiError or a client error
            error = getattr(getattr(exc, "response", None), "data", {}) or {}
            code = error.get("error", type(exc).__name__) if isinstance(error, dict) else exc
            raise MissingSecret(
                f"{ENV_APP_TOKEN} was refused by Slack (apps.connections.open: {code}); "
                "use an app-level token (xapp-...) with connections:write"
            ) from None
