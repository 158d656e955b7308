"""Test helpers for the Discord conduit, reusable by anyone testing against Discord
offline: `FakeDiscord` is a local Discord (REST and the gateway websocket) on 127.0.0.1."""

from ore_conduit_discord.testing.fake import (
    ALICE,
    DM,
    GENERAL,
    GUILD,
    RANDOM,
    TOKEN,
    FakeDiscord,
    Shown,
)

__all__ = ["ALICE", "DM", "GENERAL", "GUILD", "RANDOM", "TOKEN", "FakeDiscord", "Shown"]
