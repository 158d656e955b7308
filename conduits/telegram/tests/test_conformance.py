"""The Telegram conduit passes ore's conduit conformance kit, its bridging part included,
against the fake Bot API."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ore_conduit_telegram import TelegramConduit
from ore_conduit_telegram.testing import TelegramPlatform
from ore_core.testing.conduit_bridging import BridgingConformance
from ore_core.testing.conduit_conformance import ConduitConformance, ConduitCore, FakePlatform


class TestTelegramConduitConformance(ConduitConformance, BridgingConformance):
    conduit_class = TelegramConduit

    def endpoint_value(self, conversation: str) -> str:
        return f"{TelegramPlatform.chat_of(conversation)}:0:0"

    async def open_platform(self, core: ConduitCore) -> FakePlatform:
        return await TelegramPlatform.start()

    def conduit_config(self, platform: FakePlatform) -> Mapping[str, Any]:
        assert isinstance(platform, TelegramPlatform)
        return platform.settings()
