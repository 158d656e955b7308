"""MatrixConduit: `ore conduit matrix`, the Matrix adapter run by the SDK's engine.

The engine does the rest (the order of each conversation's events, confirming them
after the core stored them, streaming answers by edits, relayed copies); this module
only names the conduit and hands the engine its adapter, and makes `!stop` an
interrupt (the core reads `/new` and its other commands as text, but not `/stop`).
"""

from __future__ import annotations

from ore_conduit_matrix.config import MatrixConfig
from ore_conduit_matrix.ids import CONVERSATION_KEY
from ore_conduit_matrix.platform import MatrixPlatform
from ore_core.conduit import (
    Command,
    ConduitConfig,
    Engine,
    Inbound,
    PlatformConduit,
    PlatformContext,
)

__all__ = ["MatrixConduit"]


class MatrixConduit(PlatformConduit):
    """The `matrix` conduit: see the package README."""

    name = "matrix"
    description = (
        "Matrix (a bot account, unencrypted rooms): a room or an m.thread is an ore thread"
    )
    config_model = MatrixConfig
    capabilities = MatrixPlatform.capabilities
    conversation_key = CONVERSATION_KEY
    """`!room:server` for a room's main timeline, `!room:server|$root` for a thread
    (a room id holds a `:` and may hold a port, so no `KeyForm` can spell it)."""

    def platform(self, config: ConduitConfig, context: PlatformContext) -> MatrixPlatform:
        if not isinstance(config, MatrixConfig):
            raise TypeError(f"the matrix conduit needs a MatrixConfig, got {config!r}")
        return MatrixPlatform(config)

    async def forward(self, engine: Engine, thread_id: str, inbound: Inbound) -> None:
        """`!stop` interrupts the turn being written; every other event as the engine sends it."""
        if isinstance(inbound, Command) and inbound.name == "stop":
            await engine.client.interrupt(thread_id, id=inbound.platform_id)
            return
        await super().forward(engine, thread_id, inbound)
