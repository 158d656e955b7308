"""Sessions: Stream (one active conversation), Manager, TurnContext, stores, slash commands."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ore_core import _lazy_exports

if TYPE_CHECKING:
    from ore_core.session.echo import EchoProcessor
    from ore_core.session.fanout import SubscriberOverflow, Subscription
    from ore_core.session.manager import Manager
    from ore_core.session.policy import DoubleTexting
    from ore_core.session.protocols import (
        Interceptor,
        InterceptResult,
        Sink,
        SinkFunc,
        Store,
        StoreFactory,
        TurnProcessor,
        TurnProcessorFactory,
    )
    from ore_core.session.slash import Command, CommandError, CommandResult, SlashCommands
    from ore_core.session.spec import ModelSpec
    from ore_core.session.stream import Stream
    from ore_core.session.turn_context import HandlerFailed, TurnContext

_EXPORTS: dict[str, str] = {
    "EchoProcessor": "ore_core.session.echo",
    "SubscriberOverflow": "ore_core.session.fanout",
    "Subscription": "ore_core.session.fanout",
    "Manager": "ore_core.session.manager",
    "DoubleTexting": "ore_core.session.policy",
    "Interceptor": "ore_core.session.protocols",
    "InterceptResult": "ore_core.session.protocols",
    "Sink": "ore_core.session.protocols",
    "SinkFunc": "ore_core.session.protocols",
    "Store": "ore_core.session.protocols",
    "StoreFactory": "ore_core.session.protocols",
    "TurnProcessor": "ore_core.session.protocols",
    "TurnProcessorFactory": "ore_core.session.protocols",
    "Command": "ore_core.session.slash",
    "CommandError": "ore_core.session.slash",
    "CommandResult": "ore_core.session.slash",
    "SlashCommands": "ore_core.session.slash",
    "ModelSpec": "ore_core.session.spec",
    "Stream": "ore_core.session.stream",
    "HandlerFailed": "ore_core.session.turn_context",
    "TurnContext": "ore_core.session.turn_context",
}
"""Public name -> the module that defines it, imported on first access."""

__all__ = [
    "Command",
    "CommandError",
    "CommandResult",
    "DoubleTexting",
    "EchoProcessor",
    "HandlerFailed",
    "InterceptResult",
    "Interceptor",
    "Manager",
    "ModelSpec",
    "Sink",
    "SinkFunc",
    "SlashCommands",
    "Store",
    "StoreFactory",
    "Stream",
    "SubscriberOverflow",
    "Subscription",
    "TurnContext",
    "TurnProcessor",
    "TurnProcessorFactory",
]

__getattr__, __dir__ = _lazy_exports(__name__, _EXPORTS)
