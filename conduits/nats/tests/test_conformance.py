"""The bridge passes the conduit conformance kit (its bridging part too), driven by a
plain NATS client."""

from __future__ import annotations

from ore_conduit_nats import NatsBridge
from ore_conduit_nats.testing import PlainNatsClient
from ore_core.testing.conduit_bridging import BridgingConformance
from ore_core.testing.conduit_conformance import ConduitConformance, ConduitCore, FakePlatform


class TestNatsBridgeConformance(ConduitConformance, BridgingConformance):
    conduit_class = NatsBridge

    async def open_platform(self, core: ConduitCore) -> FakePlatform:
        return await PlainNatsClient.connect(core.nats_url)
