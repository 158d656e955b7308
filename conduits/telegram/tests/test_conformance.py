"""The Telegram conduit passes ore's conduit conformance kit against the fake Bot API."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ore_conduit_telegram import TelegramConduit
from ore_conduit_telegram.testing import TelegramPlatform
from ore_core.testing.conduit_conformance import ConduitConformance, ConduitCore, FakePlatform


class TestTelegramConduitConformance(ConduitConformance):
    conduit_class = TelegramConduit

    async def open_platform(self, core: ConduitCore) -> FakePlatform:
        return await TelegramPlatform.start()

    def conduit_config(self, platform: FakePlatform) -> Mapping[str, Any]:
        assert isinstance(platform, TelegramPlatform)
        return platform.settings()
