"""The Matrix conduit passes ore's conduit conformance kit against the fake homeserver."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ore_conduit_matrix import MatrixConduit
from ore_conduit_matrix.testing import MatrixKit
from ore_core.testing.conduit_conformance import ConduitConformance, ConduitCore, FakePlatform


class TestMatrixConduitConformance(ConduitConformance):
    conduit_class = MatrixConduit

    async def open_platform(self, core: ConduitCore) -> FakePlatform:
        return await MatrixKit.start()

    def conduit_config(self, platform: FakePlatform) -> Mapping[str, Any]:
        assert isinstance(platform, MatrixKit)
        return platform.settings()
