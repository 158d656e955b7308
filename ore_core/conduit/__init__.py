"""The conduit SDK: what a conduit process imports to talk to the ore core over NATS.

`ConduitClient` connects, resolves threads through the control API, sends ingress
events and opens `EventFeed`s of a thread's output; `Conduit` and `ConduitConfig` are
the base classes a conduit package subclasses. Nothing here imports the session, the
ledger or the core service, so a conduit process stays small.
"""

from ore_core.conduit.base import Conduit, ConduitConfig, ConduitConfigError, OwnSubjects
from ore_core.conduit.capabilities import Capabilities, Markup
from ore_core.conduit.client import ConduitClient, ThreadInfo, ThreadPage
from ore_core.conduit.connection import NatsCredentials, TlsFiles, subscriptions_registered
from ore_core.conduit.feed import DURABLE_NAME, Delivery, EventFeed, Hold
from ore_core.errors import ApiError, BusError, PermissionDenied

__all__ = [
    "DURABLE_NAME",
    "ApiError",
    "BusError",
    "Capabilities",
    "Conduit",
    "ConduitClient",
    "ConduitConfig",
    "ConduitConfigError",
    "Delivery",
    "EventFeed",
    "Hold",
    "Markup",
    "NatsCredentials",
    "OwnSubjects",
    "PermissionDenied",
    "ThreadInfo",
    "ThreadPage",
    "TlsFiles",
    "subscriptions_registered",
]
