"""The pluggy plugin (entry point `ore: discord = "ore_conduit_discord.plugin"`)."""
