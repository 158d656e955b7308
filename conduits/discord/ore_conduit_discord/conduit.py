"""DiscordConduit: `ore conduit discord`, the engine around `DiscordPlatform`."""

from __future__ import annotations

from ore_conduit_discord.config import DiscordConfig
from ore_conduit_discord.platform import DiscordPlatform
from ore_conduit_discord.rest import check_token
from ore_core.conduit import ConduitClient, ConduitConfig
from ore_core.conduit.engine import PlatformConduit, PlatformContext
from ore_core.endpoint import KeyForm

__all__ = ["CHANNEL_KEY", "DiscordConduit"]

CHANNEL_KEY = "discord.channel"
"""The thread metadata key naming a Discord conversation: `GUILD:CHANNEL` (`@me:CHANNEL`
for a DM), also the endpoint of a link (`ore link add T discord:GUILD:CHANNEL`)."""


class DiscordConduit(PlatformConduit):
    """The `discord` conduit: see `DiscordPlatform` and the package README."""

    name = "discord"
    description = "Discord channels, threads and DMs <-> ore threads (a bot on the gateway)"
    config_model = DiscordConfig
    capabilities = DiscordPlatform.capabilities
    conversation_key = CHANNEL_KEY
    key_form = KeyForm("GUILD:CHANNEL", "1200000000000000001:1300000000000000001")

    async def run(self, client: ConduitClient, config: ConduitConfig) -> None:
        """Ask Discord about the token first: the engine opens its feed (which waits for
        the core) before it connects the adapter, and a refused token is said at once."""
        if isinstance(config, DiscordConfig):
            await check_token(config.api_url, config.bot_token())
        await super().run(client, config)

    def platform(self, config: ConduitConfig, context: PlatformContext) -> DiscordPlatform:
        if not isinstance(config, DiscordConfig):
            raise TypeError(f"the discord conduit needs a DiscordConfig, got {config!r}")
        return DiscordPlatform(config, context)
