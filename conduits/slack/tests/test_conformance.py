"""The Slack conduit passes ore's conduit conformance kit, its bridging part included,
against the fake Slack."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ore_conduit_slack import SlackConduit
from ore_conduit_slack.testing import SlackPlatform
from ore_core.testing.conduit_bridging import BridgingConformance
from ore_core.testing.conduit_conformance import ConduitConformance, ConduitCore, FakePlatform


class TestSlackConduitConformance(ConduitConformance, BridgingConformance):
    conduit_class = SlackConduit
    bridged_key = ""

    def endpoint_value(self, conversation: str) -> str:
        assert self.bridged_key, "open_platform starts the bridged thread"
        return self.bridged_key

    async def open_platform(self, core: ConduitCore) -> FakePlatform:
        platform = await SlackPlatform.start()
        self.bridged_key = platform.bridge(self.bridged_conversation)
        return platform

    def conduit_config(self, platform: FakePlatform) -> Mapping[str, Any]:
        assert isinstance(platform, SlackPlatform)
        return platform.fake.conduit_settings()
