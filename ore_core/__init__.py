"""ore: a message-bus plugin framework for conversational agents.

The core keeps conversations as a branchable tree of turns (`ore_core.ledger`),
runs each conversation one event at a time (`ore_core.session`), loads plugins
through pluggy (`ore_core.plugins`) and talks to conduits over NATS (`ore_core.bus`).
"""

from ore_core.errors import OreError

__version__ = "0.1.0"

__all__ = ["OreError", "__version__"]
