"""ore: a message-bus plugin framework for conversational agents.

This module is the public surface: what plugin and conduit authors import. Every
name below is re-exported lazily (loaded on first use), so `import ore_core` stays
cheap and a conduit process never loads the core it does not run.

- plugins: `hookimpl`, the protocols (`Interceptor`, `InterceptResult`, `Sink`,
  `Store`, `TurnProcessor`) and factories (`StoreFactory`, `TurnProcessorFactory`),
  `TurnContext`, `Tool`, and what they are handed
  (`Stream`, `Manager`, `Thread`, `ModelSpec`, `OreSettings`);
- stores: `Store`, `Thread`, `validate_thread_id`, and the turn JSON codec
  (`turn_to_dict`, `turn_from_dict`);
- the vocabulary: `Turn`, `Role`, `TraversalControl`, the events and the artifacts;
- conduits: `Conduit`, `ConduitConfig`, `Capabilities`, `ConduitClient`, `EventFeed`, `Delivery`
  (also importable from `ore_core.conduit`, the light conduit SDK);
- background work: `TaskScope` (structured tasks; a crash is logged and reported as
  `TaskCrashed`, its `Crash` kept for health checks);
- errors: `OreError` and everything derived from it that ore raises on purpose.

Everything else (`ore_core.session.stores`, `ore_core.bus`, ...) is for the core
itself and may change between releases.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ore_core._nats.connection import NatsCredentials, TlsFiles
    from ore_core.artifacts import (
        Artifact,
        Delta,
        Image,
        Reasoning,
        ReasoningDelta,
        ReasoningSignature,
        StopReason,
        Text,
        TextDelta,
        ToolCall,
        ToolCallDelta,
        ToolResult,
        Truncation,
        UnknownArtifact,
        Usage,
    )
    from ore_core.conduit.base import Conduit, ConduitConfig, ConduitConfigError
    from ore_core.conduit.capabilities import Capabilities
    from ore_core.conduit.client import ConduitClient, ThreadInfo, ThreadPage
    from ore_core.conduit.feed import Delivery, EventFeed
    from ore_core.config import ConfigError, OreSettings
    from ore_core.errors import (
        ApiError,
        ArtifactError,
        BusError,
        Interrupted,
        InvalidThreadId,
        JournalLocked,
        LedgerError,
        MessageRejected,
        OreError,
        PermissionDenied,
        SessionClosed,
        SessionNotFound,
        StaleThread,
        StoreError,
        ThreadCorrupt,
        ThreadExists,
        ThreadNotFound,
        TurnCancelled,
        TurnFailed,
        TurnNotFound,
        describe_validation_error,
    )
    from ore_core.events import (
        ActivityEvent,
        ArtifactEvent,
        ErrorEvent,
        EventContext,
        EventDecodeError,
        IngressEvent,
        InterruptEvent,
        LifecycleEvent,
        LifecyclePhase,
        Notice,
        NoticeEvent,
        OutputEvent,
        PropertiesEvent,
        PropertyOperation,
        SessionSwitchEvent,
        Severity,
        TurnCompleteEvent,
        UserMessageEvent,
    )
    from ore_core.ids import validate_thread_id
    from ore_core.ledger.thread import Thread
    from ore_core.plugins.hookspecs import hookimpl
    from ore_core.plugins.manager import PluginError
    from ore_core.plugins.tools import Tool
    from ore_core.session.fanout import SubscriberOverflow
    from ore_core.session.manager import Manager
    from ore_core.session.protocols import (
        Interceptor,
        InterceptResult,
        Sink,
        Store,
        StoreFactory,
        TurnProcessor,
        TurnProcessorFactory,
    )
    from ore_core.session.slash import CommandError
    from ore_core.session.spec import ModelSpec
    from ore_core.session.stream import Stream
    from ore_core.session.turn_context import HandlerFailed, TurnContext
    from ore_core.subjects import SubjectError
    from ore_core.tasks import Crash, TaskCrashed, TaskScope
    from ore_core.turn import Role, TraversalControl, Turn, turn_from_dict, turn_to_dict
    from ore_core.version import __version__

_EXPORTS: dict[str, str] = {
    "__version__": "ore_core.version",
    "hookimpl": "ore_core.plugins.hookspecs",
    "InterceptResult": "ore_core.session.protocols",
    "Interceptor": "ore_core.session.protocols",
    "Sink": "ore_core.session.protocols",
    "Store": "ore_core.session.protocols",
    "TurnProcessor": "ore_core.session.protocols",
    "StoreFactory": "ore_core.session.protocols",
    "TurnProcessorFactory": "ore_core.session.protocols",
    "TurnContext": "ore_core.session.turn_context",
    "Tool": "ore_core.plugins.tools",
    "Stream": "ore_core.session.stream",
    "Manager": "ore_core.session.manager",
    "ModelSpec": "ore_core.session.spec",
    "Thread": "ore_core.ledger.thread",
    "Role": "ore_core.turn",
    "TraversalControl": "ore_core.turn",
    "Turn": "ore_core.turn",
    "turn_from_dict": "ore_core.turn",
    "turn_to_dict": "ore_core.turn",
    "validate_thread_id": "ore_core.ids",
    "OreSettings": "ore_core.config",
    "ActivityEvent": "ore_core.events",
    "ArtifactEvent": "ore_core.events",
    "ErrorEvent": "ore_core.events",
    "EventContext": "ore_core.events",
    "IngressEvent": "ore_core.events",
    "InterruptEvent": "ore_core.events",
    "LifecycleEvent": "ore_core.events",
    "LifecyclePhase": "ore_core.events",
    "Notice": "ore_core.events",
    "NoticeEvent": "ore_core.events",
    "OutputEvent": "ore_core.events",
    "PropertiesEvent": "ore_core.events",
    "PropertyOperation": "ore_core.events",
    "SessionSwitchEvent": "ore_core.events",
    "Severity": "ore_core.events",
    "TurnCompleteEvent": "ore_core.events",
    "UserMessageEvent": "ore_core.events",
    "Artifact": "ore_core.artifacts",
    "Delta": "ore_core.artifacts",
    "Image": "ore_core.artifacts",
    "Reasoning": "ore_core.artifacts",
    "ReasoningDelta": "ore_core.artifacts",
    "ReasoningSignature": "ore_core.artifacts",
    "StopReason": "ore_core.artifacts",
    "Text": "ore_core.artifacts",
    "TextDelta": "ore_core.artifacts",
    "ToolCall": "ore_core.artifacts",
    "ToolCallDelta": "ore_core.artifacts",
    "ToolResult": "ore_core.artifacts",
    "Truncation": "ore_core.artifacts",
    "UnknownArtifact": "ore_core.artifacts",
    "Usage": "ore_core.artifacts",
    "Capabilities": "ore_core.conduit.capabilities",
    "Conduit": "ore_core.conduit.base",
    "ConduitConfig": "ore_core.conduit.base",
    "ConduitConfigError": "ore_core.conduit.base",
    "ConduitClient": "ore_core.conduit.client",
    "ThreadInfo": "ore_core.conduit.client",
    "ThreadPage": "ore_core.conduit.client",
    "Delivery": "ore_core.conduit.feed",
    "NatsCredentials": "ore_core._nats.connection",
    "TlsFiles": "ore_core._nats.connection",
    "EventFeed": "ore_core.conduit.feed",
    "OreError": "ore_core.errors",
    "ApiError": "ore_core.errors",
    "ArtifactError": "ore_core.errors",
    "BusError": "ore_core.errors",
    "InvalidThreadId": "ore_core.errors",
    "Interrupted": "ore_core.errors",
    "JournalLocked": "ore_core.errors",
    "LedgerError": "ore_core.errors",
    "MessageRejected": "ore_core.errors",
    "PermissionDenied": "ore_core.errors",
    "SessionClosed": "ore_core.errors",
    "SessionNotFound": "ore_core.errors",
    "StaleThread": "ore_core.errors",
    "StoreError": "ore_core.errors",
    "ThreadCorrupt": "ore_core.errors",
    "ThreadExists": "ore_core.errors",
    "ThreadNotFound": "ore_core.errors",
    "TurnCancelled": "ore_core.errors",
    "TurnFailed": "ore_core.errors",
    "TurnNotFound": "ore_core.errors",
    "ConfigError": "ore_core.config",
    "EventDecodeError": "ore_core.events",
    "PluginError": "ore_core.plugins.manager",
    "SubscriberOverflow": "ore_core.session.fanout",
    "CommandError": "ore_core.session.slash",
    "HandlerFailed": "ore_core.session.turn_context",
    "SubjectError": "ore_core.subjects",
    "TaskCrashed": "ore_core.tasks",
    "TaskScope": "ore_core.tasks",
    "Crash": "ore_core.tasks",
    "describe_validation_error": "ore_core.errors",
}
"""Public name -> the module that defines it, imported on first access."""

__all__ = [
    "hookimpl",
    "InterceptResult",
    "Interceptor",
    "Sink",
    "Store",
    "TurnProcessor",
    "StoreFactory",
    "TurnProcessorFactory",
    "TurnContext",
    "Tool",
    "Stream",
    "Manager",
    "ModelSpec",
    "Thread",
    "Role",
    "TraversalControl",
    "Turn",
    "turn_from_dict",
    "turn_to_dict",
    "validate_thread_id",
    "OreSettings",
    "ActivityEvent",
    "ArtifactEvent",
    "ErrorEvent",
    "EventContext",
    "IngressEvent",
    "InterruptEvent",
    "LifecycleEvent",
    "LifecyclePhase",
    "Notice",
    "NoticeEvent",
    "OutputEvent",
    "PropertiesEvent",
    "PropertyOperation",
    "SessionSwitchEvent",
    "Severity",
    "TurnCompleteEvent",
    "UserMessageEvent",
    "Artifact",
    "Delta",
    "Image",
    "Reasoning",
    "ReasoningDelta",
    "ReasoningSignature",
    "StopReason",
    "Text",
    "TextDelta",
    "ToolCall",
    "ToolCallDelta",
    "ToolResult",
    "Truncation",
    "UnknownArtifact",
    "Usage",
    "Capabilities",
    "Conduit",
    "ConduitConfig",
    "ConduitConfigError",
    "ConduitClient",
    "ThreadInfo",
    "ThreadPage",
    "Delivery",
    "NatsCredentials",
    "TlsFiles",
    "EventFeed",
    "OreError",
    "ApiError",
    "ArtifactError",
    "BusError",
    "InvalidThreadId",
    "Interrupted",
    "JournalLocked",
    "LedgerError",
    "MessageRejected",
    "PermissionDenied",
    "SessionClosed",
    "SessionNotFound",
    "StaleThread",
    "StoreError",
    "ThreadCorrupt",
    "ThreadExists",
    "ThreadNotFound",
    "TurnCancelled",
    "TurnFailed",
    "TurnNotFound",
    "ConfigError",
    "EventDecodeError",
    "PluginError",
    "SubscriberOverflow",
    "CommandError",
    "HandlerFailed",
    "SubjectError",
    "TaskCrashed",
    "TaskScope",
    "Crash",
    "describe_validation_error",
    "__version__",
]


def _lazy_exports(
    package: str, exports: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The PEP 562 `__getattr__` and `__dir__` of a face: `package` re-exports each name
    of `exports` (name -> defining module), importing the module on first use only.

    Every package `__init__` of ore_core is such a face (or empty), so importing one
    module loads what it needs and not its siblings.
    """
    namespace = sys.modules[package].__dict__

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value  # later lookups skip this function
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *exports})

    return __getattr__, __dir__


__getattr__, __dir__ = _lazy_exports(__name__, _EXPORTS)
