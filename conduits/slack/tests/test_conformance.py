"""The Slack conduit passes ore's conduit conformance kit against the fake Slack."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ore_conduit_slack import SlackConduit
from ore_conduit_slack.testing import SlackPlatform
from ore_core.testing.conduit_conformance import ConduitConformance, ConduitCore, FakePlatform


class TestSlackConduitConformance(ConduitConformance):
    conduit_class = SlackConduit

    async def open_platform(self, core: ConduitCore) -> FakePlatform:
        return await SlackPlatform.start()

    def conduit_config(self, platform: FakePlatform) -> Mapping[str, Any]:
        assert isinstance(platform, SlackPlatform)
        return platform.fake.conduit_settings()
