"""Built-in sink `log`: an operator's record of failed turns, and of every turn at DEBUG.

Failures (`error` events) are logged at WARNING with the `thread_id` and provenance.
Finished turns and `lifecycle` done/cancelled are logged at DEBUG only: a line per
turn at INFO was a tenth of the core's CPU per message (issue 11), and a busy core's
operators want failures, not a line per answer. When DEBUG is off at the moment the
sink is registered, it asks only for `error` events, so the per-turn events never
even reach it (no buffer push, no task wake-up per turn); restart with
`log.level = "debug"` to get the per-turn lines. Deltas are never logged.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import structlog

from ore_core.events import ErrorEvent, LifecycleEvent, OutputEvent, TurnCompleteEvent
from ore_core.plugins.hookspecs import hookimpl
from ore_core.session.protocols import Sink

__all__ = ["LogSink", "ore_register_sinks"]

log = structlog.get_logger("ore.events")

_PER_TURN_KINDS = frozenset({"turn_complete", "lifecycle"})


class LogSink:
    """Logs `error` at WARNING; `turn_complete` and `lifecycle` done/cancelled at DEBUG."""

    name = "log"

    def __init__(self, *, per_turn: bool | None = None) -> None:
        if per_turn is None:
            per_turn = log.bind().is_enabled_for(logging.DEBUG)
        self.kinds = frozenset({"error"}) | (_PER_TURN_KINDS if per_turn else frozenset())

    async def emit(self, thread_id: str, event: OutputEvent) -> None:
        """Log `event` with `thread_id` and the conduit it came through (`provenance`)."""
        context = {"thread_id": thread_id}
        if event.context.provenance:
            context["provenance"] = event.context.provenance
        if isinstance(event, TurnCompleteEvent):
            turn = event.turn
            if turn.event_id:
                context["event_id"] = turn.event_id
            log.debug(
                "turn complete",
                **context,
                turn_id=turn.id,
                role=str(turn.role),
                artifacts=[artifact.kind for artifact in turn.artifacts],
            )
        elif isinstance(event, ErrorEvent):
            log.warning("turn failed", **context, code=event.code, message=event.message)
        elif isinstance(event, LifecycleEvent) and event.phase in ("done", "cancelled"):
            log.debug(f"turn {event.phase}", **context)


@hookimpl
def ore_register_sinks(register: Callable[[Sink], None]) -> None:
    """Register the `log` sink."""
    register(LogSink())
