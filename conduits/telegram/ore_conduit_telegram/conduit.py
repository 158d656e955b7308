"""TelegramConduit: `ore conduit telegram`, the SDK's engine around `TelegramPlatform`.

The engine keeps each conversation's order, confirms an update once the core has it,
relays copies of a linked thread and paces every call; the conduit adds what is
Telegram's: its local replies and commands (`inbound.Forwarding`, the `admit` and
`forward` hooks), and its own lane per thread (`outbound.ThreadRenderer`: drafts,
typing, and an answer record that survives a kill -9, since Telegram has no
idempotency key).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import ClassVar

import aiohttp

from ore_conduit_telegram.api import BotApi, Limits
from ore_conduit_telegram.config import TelegramConfig
from ore_conduit_telegram.ids import THREAD_KEY
from ore_conduit_telegram.inbound import Forwarding
from ore_conduit_telegram.outbound import OUTPUT_KINDS, ThreadRenderer
from ore_conduit_telegram.platform import TelegramPlatform, check_token
from ore_core.conduit import ConduitClient, ConduitConfig, Inbound
from ore_core.conduit.answering import Outbound
from ore_core.conduit.engine import Engine, PlatformConduit, PlatformContext
from ore_core.conduit.lanes import Lane
from ore_core.endpoint import KeyForm

__all__ = ["TelegramConduit"]


class TelegramConduit(PlatformConduit):
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
        """Check the token first (one line if it is missing or refused), then run the
        engine until cancelled."""
        if not isinstance(config, TelegramConfig):
            raise TypeError(f"the telegram conduit needs a TelegramConfig, got {config!r}")
        config.check_secrets()
        async with aiohttp.ClientSession() as session:
            limits = Limits(1.0, 20.0, 30.0)
            await check_token(BotApi(session, config.api_url, config.bot_token(), limits))
        await super().run(client, config)

    def platform(self, config: ConduitConfig, context: PlatformContext) -> TelegramPlatform:
        assert isinstance(config, TelegramConfig)
        return TelegramPlatform(config, context, type(self).on_webhook_ready)

    def feed_kinds(self, config: ConduitConfig) -> Collection[str]:
        return OUTPUT_KINDS

    def copy_patience(self, config: ConduitConfig) -> float:
        assert isinstance(config, TelegramConfig)
        return config.relay_deadline

    def lane(self, engine: Engine, thread_id: str, outbound: Outbound) -> Lane:
        assert isinstance(engine.platform, TelegramPlatform)
        return ThreadRenderer(engine, engine.platform, thread_id)

    async def admit(self, engine: Engine, inbound: Inbound) -> bool:
        assert isinstance(engine.platform, TelegramPlatform)
        return await Forwarding(engine, engine.platform).admit(inbound)

    async def forward(self, engine: Engine, thread_id: str, inbound: Inbound) -> None:
        assert isinstance(engine.platform, TelegramPlatform)
        await Forwarding(engine, engine.platform).forward(thread_id, inbound)
