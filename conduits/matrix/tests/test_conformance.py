"""The Matrix conduit passes ore's conduit conformance kit, its bridging part included,
against the fake homeserver."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ore_conduit_matrix import MatrixConduit
from ore_conduit_matrix.testing import MatrixKit
from ore_core.testing.conduit_bridging import BridgingConformance
from ore_core.testing.conduit_conformance import ConduitConformance, ConduitCore, FakePlatform


class TestMatrixConduitConformance(ConduitConformance, BridgingConformance):
    conduit_class = MatrixConduit

    def endpoint_value(self, conversation: str) -> str:
        return MatrixKit.room_id(conversation)

    async def open_platform(self, core: ConduitCore) -> FakePlatform:
        return await MatrixKit.start()

    def conduit_config(self, platform: FakePlatform) -> Mapping[str, Any]:
        assert isinstance(platform, MatrixKit)
        return platform.settings()
