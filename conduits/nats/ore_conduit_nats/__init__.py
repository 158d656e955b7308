"""ore-conduit-nats: plain NATS subjects <-> ore conversations.

Systems that speak NATS but not ore's schema publish text (or a small JSON object) on
`bridge.<channel>.in` and read replies on `bridge.<channel>.out`, or ask with a
request and get the finished answer back. Run it with `ore conduit nats`; configure
it in `[plugins.nats]` (see `NatsBridgeConfig` and the README).
"""

from ore_conduit_nats.bridge import CHANNEL_KEY, NatsBridge
from ore_conduit_nats.config import NatsBridgeConfig, OutputFormat
from ore_conduit_nats.wire import Inbound, MalformedMessage, Reply, encode_reply, parse_inbound

__all__ = [
    "CHANNEL_KEY",
    "Inbound",
    "MalformedMessage",
    "NatsBridge",
    "NatsBridgeConfig",
    "OutputFormat",
    "Reply",
    "encode_reply",
    "parse_inbound",
]
