"""ore-conduit-web: a chat page in the browser and an HTTP API, as an ore conduit.

`ore conduit web` serves it (127.0.0.1:8080 by default) against a running `ore serve`.
See `WebConfig` for the settings and README.md for the setup from zero.
"""

from ore_conduit_web.conduit import WebConduit
from ore_conduit_web.config import WebConfig

__all__ = ["WebConduit", "WebConfig"]
