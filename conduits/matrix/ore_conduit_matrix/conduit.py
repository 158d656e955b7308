"""MatrixConduit: `ore conduit matrix`, the Matrix adapter run by the SDK's engine.

The engine does the rest (the order of each conversation's events, confirming them
after the core stored them, streaming answers by edits, relayed copies); this module
only names the conduit and hands the engine its adapter (`!stop` is the engine's
interrupt, like every platform's stop command).
"""

from __future__ import annotations

from ore_conduit_matrix.config import MatrixConfig
from ore_conduit_matrix.ids import CONVERSATION_KEY
from ore_conduit_matrix.platform import MatrixPlatform
from ore_core.conduit import (
    ConduitConfig,
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
        return MatrixPlatform(config, context)
