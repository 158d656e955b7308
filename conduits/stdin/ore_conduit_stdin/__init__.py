"""ore-conduit-stdin: chat with ore in a terminal, or answer piped input line by line.

`ore chat` runs it (with an embedded core when no NATS URL is configured);
`ore conduit stdin` runs it against a running `ore serve`. See `StdinConfig`.
"""

from ore_conduit_stdin.conduit import StdinConduit
from ore_conduit_stdin.config import StdinConfig
from ore_conduit_stdin.pipe import StdinError

__all__ = ["StdinConduit", "StdinConfig", "StdinError"]
