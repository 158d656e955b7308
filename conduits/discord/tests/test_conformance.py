"""The Discord conduit passes ore's conduit conformance kit, its bridging part included,
against the fake Discord, with the real core: the engine around `DiscordPlatform`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ore_conduit_discord import DiscordConduit
from ore_conduit_discord.testing.platform import DiscordKitPlatform
from ore_core.testing.conduit_bridging import BridgingConformance
from ore_core.testing.conduit_conformance import ConduitConformance, ConduitCore, FakePlatform


class TestDiscordConduitConformance(ConduitConformance, BridgingConformance):
    conduit_class = DiscordConduit

    def endpoint_value(self, conversation: str) -> str:
        return DiscordKitPlatform.endpoint(conversation)

    async def open_platform(self, core: ConduitCore) -> FakePlatform:
        return await DiscordKitPlatform.start()

    def conduit_config(self, platform: FakePlatform) -> Mapping[str, Any]:
        assert isinstance(platform, DiscordKitPlatform)
        return platform.settings()
