"""The NATS bus: the core's service (`CoreService`) and what it is built from.

protocol.md is the wire contract; `subjects` spells every subject and header.
"""

from ore_core.bus.auth import TlsFiles
from ore_core.bus.client import ConduitClient, ThreadInfo, ThreadPage
from ore_core.bus.control_api import ControlAPI
from ore_core.bus.egress import Egress
from ore_core.bus.embedded import EmbeddedNatsCluster, EmbeddedNatsServer, NatsServerError
from ore_core.bus.errors import ApiError, BusError, PermissionDenied
from ore_core.bus.feed import Delivery, EventFeed
from ore_core.bus.health import HealthServer
from ore_core.bus.ingress import Ingress
from ore_core.bus.pipeline import Pipeline
from ore_core.bus.puller import Puller
from ore_core.bus.service import CoreService, run, serve
from ore_core.bus.streams import BusConfig, BusConfigError, consumer_name, ensure_streams
from ore_core.bus.subjects import SCHEMA_VERSION, Subjects, partition_of

__all__ = [
    "SCHEMA_VERSION",
    "ApiError",
    "BusConfig",
    "BusError",
    "ConduitClient",
    "ControlAPI",
    "Delivery",
    "EmbeddedNatsCluster",
    "EmbeddedNatsServer",
    "EventFeed",
    "NatsServerError",
    "PermissionDenied",
    "Subjects",
    "ThreadInfo",
    "ThreadPage",
    "TlsFiles",
    "partition_of",
    "BusConfigError",
    "CoreService",
    "Egress",
    "HealthServer",
    "Ingress",
    "Pipeline",
    "Puller",
    "consumer_name",
    "ensure_streams",
    "run",
    "serve",
]
