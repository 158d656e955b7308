"""The conduit SDK: what a conduit process imports to talk to the ore core over NATS.

`ConduitClient` connects, resolves threads through the control API, sends ingress
events and opens `EventFeed`s of a thread's output; `Conduit` and `ConduitConfig` are
the base classes a conduit package subclasses. Nothing here imports the session, the
ledger or the core service, so a conduit process stays small.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ore_core import _lazy_exports

if TYPE_CHECKING:
    from ore_core._nats.connection import NatsCredentials, TlsFiles, subscriptions_registered
    from ore_core.conduit.answers import AnswerRecord
    from ore_core.conduit.base import (
        Conduit,
        ConduitConfig,
        ConduitConfigError,
        OwnSubjects,
        StateDir,
    )
    from ore_core.conduit.capabilities import Capabilities, Markup
    from ore_core.conduit.client import ConduitClient, ThreadInfo, ThreadPage
    from ore_core.conduit.control import ControlClient
    from ore_core.conduit.counters import metrics
    from ore_core.conduit.engine import Engine, PlatformConduit, PlatformContext
    from ore_core.conduit.feed import DURABLE_NAME, Delivery, DurableName, EventFeed, Hold
    from ore_core.conduit.lanes import Lane, ThreadLanes
    from ore_core.conduit.platform import (
        Command,
        Delete,
        Edit,
        FailureReason,
        Inbound,
        Message,
        Part,
        PartKind,
        Platform,
        PlatformError,
        RateLimited,
        Reaction,
        Reacts,
        ReadsBack,
        Refused,
        Sender,
        Transient,
        part_key,
    )
    from ore_core.conduit.relay import (
        Relayed,
        SettingsCache,
        ThreadSettings,
        classify,
        degrade,
        split_message,
        turn_text,
    )
    from ore_core.conduit.waiting import core_away, until_answered
    from ore_core.errors import ApiError, BusError, PermissionDenied

_EXPORTS: dict[str, str] = {
    "AnswerRecord": "ore_core.conduit.answers",
    "Conduit": "ore_core.conduit.base",
    "ConduitConfig": "ore_core.conduit.base",
    "ConduitConfigError": "ore_core.conduit.base",
    "OwnSubjects": "ore_core.conduit.base",
    "Capabilities": "ore_core.conduit.capabilities",
    "Markup": "ore_core.conduit.capabilities",
    "ConduitClient": "ore_core.conduit.client",
    "ControlClient": "ore_core.conduit.control",
    "ThreadInfo": "ore_core.conduit.client",
    "ThreadPage": "ore_core.conduit.client",
    "NatsCredentials": "ore_core._nats.connection",
    "TlsFiles": "ore_core._nats.connection",
    "subscriptions_registered": "ore_core._nats.connection",
    "DURABLE_NAME": "ore_core.conduit.feed",
    "DurableName": "ore_core.conduit.feed",
    "StateDir": "ore_core.conduit.base",
    "Delivery": "ore_core.conduit.feed",
    "EventFeed": "ore_core.conduit.feed",
    "Hold": "ore_core.conduit.feed",
    "Lane": "ore_core.conduit.lanes",
    "ThreadLanes": "ore_core.conduit.lanes",
    "Command": "ore_core.conduit.platform",
    "Delete": "ore_core.conduit.platform",
    "Edit": "ore_core.conduit.platform",
    "FailureReason": "ore_core.conduit.platform",
    "Inbound": "ore_core.conduit.platform",
    "Message": "ore_core.conduit.platform",
    "Part": "ore_core.conduit.platform",
    "PartKind": "ore_core.conduit.platform",
    "Engine": "ore_core.conduit.engine",
    "PlatformConduit": "ore_core.conduit.engine",
    "PlatformContext": "ore_core.conduit.engine",
    "Platform": "ore_core.conduit.platform",
    "PlatformError": "ore_core.conduit.platform",
    "RateLimited": "ore_core.conduit.platform",
    "Reaction": "ore_core.conduit.platform",
    "Reacts": "ore_core.conduit.platform",
    "ReadsBack": "ore_core.conduit.platform",
    "Refused": "ore_core.conduit.platform",
    "Sender": "ore_core.conduit.platform",
    "Transient": "ore_core.conduit.platform",
    "part_key": "ore_core.conduit.platform",
    "Relayed": "ore_core.conduit.relay",
    "SettingsCache": "ore_core.conduit.relay",
    "ThreadSettings": "ore_core.conduit.relay",
    "classify": "ore_core.conduit.relay",
    "degrade": "ore_core.conduit.relay",
    "split_message": "ore_core.conduit.relay",
    "turn_text": "ore_core.conduit.relay",
    "metrics": "ore_core.conduit.counters",
    "core_away": "ore_core.conduit.waiting",
    "until_answered": "ore_core.conduit.waiting",
    "ApiError": "ore_core.errors",
    "BusError": "ore_core.errors",
    "PermissionDenied": "ore_core.errors",
}
"""Public name -> the module that defines it, imported on first access."""

__all__ = [
    "AnswerRecord",
    "DURABLE_NAME",
    "DurableName",
    "StateDir",
    "ApiError",
    "BusError",
    "Capabilities",
    "Conduit",
    "ConduitClient",
    "ControlClient",
    "ConduitConfig",
    "ConduitConfigError",
    "Delivery",
    "EventFeed",
    "Hold",
    "Lane",
    "Markup",
    "NatsCredentials",
    "OwnSubjects",
    "PermissionDenied",
    "Command",
    "Delete",
    "Edit",
    "FailureReason",
    "Inbound",
    "Message",
    "Part",
    "PartKind",
    "Platform",
    "PlatformConduit",
    "PlatformContext",
    "Engine",
    "PlatformError",
    "RateLimited",
    "Reaction",
    "Reacts",
    "ReadsBack",
    "Refused",
    "Sender",
    "Transient",
    "part_key",
    "Relayed",
    "SettingsCache",
    "ThreadInfo",
    "ThreadLanes",
    "ThreadSettings",
    "ThreadPage",
    "TlsFiles",
    "classify",
    "core_away",
    "degrade",
    "split_message",
    "turn_text",
    "until_answered",
    "metrics",
    "subscriptions_registered",
]

__getattr__, __dir__ = _lazy_exports(__name__, _EXPORTS)
