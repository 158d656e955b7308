"""ore-conduit-discord: Discord channels, threads and DMs <-> ore threads.

Run it with `ore conduit discord`; configure it with the environment variable
DISCORD_BOT_TOKEN and the `[plugins.discord]` table (see `DiscordConfig` and the
README). `ore_conduit_discord.testing` has a fake Discord (REST and gateway) for tests.
"""

from ore_conduit_discord.conduit import CHANNEL_KEY, DiscordConduit
from ore_conduit_discord.config import DiscordConfig, MissingToken
from ore_conduit_discord.platform import DiscordPlatform

__all__ = ["CHANNEL_KEY", "DiscordConduit", "DiscordConfig", "DiscordPlatform", "MissingToken"]
