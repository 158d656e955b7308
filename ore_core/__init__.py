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

if TYPE_CHECKING:  # `X as X`: re-exported for type checkers (`_EXPORTS` at run time)
    from ore_core._nats.connection import NatsCredentials as NatsCredentials
    from ore_core._nats.connection import TlsFiles as TlsFiles
    from ore_core.artifacts import Artifact as Artifact
    from ore_core.artifacts import Delta as Delta
    from ore_core.artifacts import Image as Image
    from ore_core.artifacts import Reasoning as Reasoning
    from ore_core.artifacts import ReasoningDelta as ReasoningDelta
    from ore_core.artifacts import ReasoningSignature as ReasoningSignature
    from ore_core.artifacts import StopReason as StopReason
    from ore_core.artifacts import Text as Text
    from ore_core.artifacts import TextDelta as TextDelta
    from ore_core.artifacts import ToolCall as ToolCall
    from ore_core.artifacts import ToolCallDelta as ToolCallDelta
    from ore_core.artifacts import ToolResult as ToolResult
    from ore_core.artifacts import Truncation as Truncation
    from ore_core.artifacts import UnknownArtifact as UnknownArtifact
    from ore_core.artifacts import Usage as Usage
    from ore_core.conduit.base import Conduit as Conduit
    from ore_core.conduit.base import ConduitConfig as ConduitConfig
    from ore_core.conduit.base import ConduitConfigError as ConduitConfigError
    from ore_core.conduit.capabilities import Capabilities as Capabilities
    from ore_core.conduit.client import ConduitClient as ConduitClient
    from ore_core.conduit.client import ThreadInfo as ThreadInfo
    from ore_core.conduit.client import ThreadPage as ThreadPage
    from ore_core.conduit.feed import Delivery as Delivery
    from ore_core.conduit.feed import EventFeed as EventFeed
    from ore_core.config import ConfigError as ConfigError
    from ore_core.config import OreSettings as OreSettings
    from ore_core.errors import ApiError as ApiError
    from ore_core.errors import ArtifactError as ArtifactError
    from ore_core.errors import BusError as BusError
    from ore_core.errors import Interrupted as Interrupted
    from ore_core.errors import InvalidThreadId as InvalidThreadId
    from ore_core.errors import JournalLocked as JournalLocked
    from ore_core.errors import LedgerError as LedgerError
    from ore_core.errors import MessageRejected as MessageRejected
    from ore_core.errors import OreError as OreError
    from ore_core.errors import PermissionDenied as PermissionDenied
    from ore_core.errors import SessionClosed as SessionClosed
    from ore_core.errors import SessionNotFound as SessionNotFound
    from ore_core.errors import StaleThread as StaleThread
    from ore_core.errors import StoreError as StoreError
    from ore_core.errors import ThreadCorrupt as ThreadCorrupt
    from ore_core.errors import ThreadExists as ThreadExists
    from ore_core.errors import ThreadNotFound as ThreadNotFound
    from ore_core.errors import TurnCancelled as TurnCancelled
    from ore_core.errors import TurnFailed as TurnFailed
    from ore_core.errors import TurnNotFound as TurnNotFound
    from ore_core.errors import describe_validation_error as describe_validation_error
    from ore_core.events import ActivityEvent as ActivityEvent
    from ore_core.events import ArtifactEvent as ArtifactEvent
    from ore_core.events import ErrorEvent as ErrorEvent
    from ore_core.events import EventContext as EventContext
    from ore_core.events import EventDecodeError as EventDecodeError
    from ore_core.events import IngressEvent as IngressEvent
    from ore_core.events import InterruptEvent as InterruptEvent
    from ore_core.events import LifecycleEvent as LifecycleEvent
    from ore_core.events import LifecyclePhase as LifecyclePhase
    from ore_core.events import Notice as Notice
    from ore_core.events import NoticeEvent as NoticeEvent
    from ore_core.events import OutputEvent as OutputEvent
    from ore_core.events import PropertiesEvent as PropertiesEvent
    from ore_core.events import PropertyOperation as PropertyOperation
    from ore_core.events import SessionSwitchEvent as SessionSwitchEvent
    from ore_core.events import Severity as Severity
    from ore_core.events import TurnCompleteEvent as TurnCompleteEvent
    from ore_core.events import UserMessageEvent as UserMessageEvent
    from ore_core.ids import validate_thread_id as validate_thread_id
    from ore_core.ledger.thread import Thread as Thread
    from ore_core.plugins.hookspecs import hookimpl as hookimpl
    from ore_core.plugins.manager import PluginError as PluginError
    from ore_core.plugins.tools import Tool as Tool
    from ore_core.session.fanout import SubscriberOverflow as SubscriberOverflow
    from ore_core.session.manager import Manager as Manager
    from ore_core.session.protocols import Interceptor as Interceptor
    from ore_core.session.protocols import InterceptResult as InterceptResult
    from ore_core.session.protocols import Sink as Sink
    from ore_core.session.protocols import Store as Store
    from ore_core.session.protocols import StoreFactory as StoreFactory
    from ore_core.session.protocols import TurnProcessor as TurnProcessor
    from ore_core.session.protocols import TurnProcessorFactory as TurnProcessorFactory
    from ore_core.session.slash import CommandError as CommandError
    from ore_core.session.spec import ModelSpec as ModelSpec
    from ore_core.session.stream import Stream as Stream
    from ore_core.session.turn_context import HandlerFailed as HandlerFailed
    from ore_core.session.turn_context import TurnContext as TurnContext
    from ore_core.subjects import SubjectError as SubjectError
    from ore_core.tasks import Crash as Crash
    from ore_core.tasks import TaskCrashed as TaskCrashed
    from ore_core.tasks import TaskScope as TaskScope
    from ore_core.turn import Role as Role
    from ore_core.turn import TraversalControl as TraversalControl
    from ore_core.turn import Turn as Turn
    from ore_core.turn import turn_from_dict as turn_from_dict
    from ore_core.turn import turn_to_dict as turn_to_dict
    from ore_core.version import __version__ as __version__

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

__all__ = [*_EXPORTS]
"""Every public name (type checkers read the `X as X` imports instead)."""


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
