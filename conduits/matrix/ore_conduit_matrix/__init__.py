"""ore-conduit-matrix: Matrix rooms and threads <-> ore threads.

Run it with `ore conduit matrix`; configure it with MATRIX_PASSWORD or
MATRIX_ACCESS_TOKEN and the `[plugins.matrix]` table (see `MatrixConfig` and the
README). `ore_conduit_matrix.testing` has a fake homeserver for tests.
"""

from ore_conduit_matrix.conduit import MatrixConduit
from ore_conduit_matrix.config import MatrixConfig, MissingCredentials
from ore_conduit_matrix.ids import CONVERSATION_KEY, Conversation
from ore_conduit_matrix.platform import MatrixPlatform

__all__ = [
    "CONVERSATION_KEY",
    "Conversation",
    "MatrixConduit",
    "MatrixConfig",
    "MatrixPlatform",
    "MissingCredentials",
]
