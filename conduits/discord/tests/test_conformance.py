"""The Discord conduit passes ore's conduit conformance kit against the fake Discord,
with the real core: the engine around `DiscordPlatform`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ore_conduit_discord import DiscordConduit
from ore_conduit_discord.testing.platform import DiscordKitPlatform
from ore_core.testing.conduit_conformance import ConduitConformance, ConduitCore, FakePlatform


class TestDiscordConduitConformance(ConduitConformance):
    conduit_class = DiscordConduit

    async def open_platform(self, core: ConduitCore) -> FakePlatform:
        return await DiscordKitPlatform.start()

    def conduit_config(self, platform: FakePlatform) -> Mapping[str, Any]:
        assert isinstance(platform, DiscordKitPlatform)
        return platform.settings()
