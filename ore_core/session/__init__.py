"""Sessions: Stream (one active conversation), Manager, TurnContext, stores, slash commands."""

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
