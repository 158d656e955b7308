"""Built-in sink `log`: one structured log line per finished turn, failure or cancellation.

It keeps an operator's view of every thread (`thread_id` on every line) without
message contents or deltas: deltas are filtered out by `kinds` before they reach
the sink, so a streamed answer costs no log volume.
"""

from __future__ import annotations

from collections.abc import Callable

import structlog

from ore_core.events import ErrorEvent, LifecycleEvent, OutputEvent, TurnCompleteEvent
from ore_core.plugins.hookspecs import hookimpl
from ore_core.session.protocols import Sink

__all__ = ["LogSink", "ore_register_sinks"]

log = structlog.get_logger("ore.events")


class LogSink:
    """Logs `turn_complete` and `lifecycle` done/cancelled at INFO, `error` at WARNING."""

    name = "log"
    kinds = frozenset({"turn_complete", "error", "lifecycle"})

    async def emit(self, thread_id: str, event: OutputEvent) -> None:
        """Log `event` with `thread_id` and the conduit it came through (`provenance`)."""
        context = {"thread_id": thread_id}
        if event.context.provenance:
            context["provenance"] = event.context.provenance
        if isinstance(event, TurnCompleteEvent):
            turn = event.turn
            if turn.event_id:
                context["event_id"] = turn.event_id
            log.info(
                "turn complete",
                **context,
                turn_id=turn.id,
                role=str(turn.role),
                artifacts=[artifact.kind for artifact in turn.artifacts],
            )
        elif isinstance(event, ErrorEvent):
            log.warning("turn failed", **context, code=event.code, message=event.message)
        elif isinstance(event, LifecycleEvent) and event.phase in ("done", "cancelled"):
            log.info(f"turn {event.phase}", **context)


@hookimpl
def ore_register_sinks(register: Callable[[Sink], None]) -> None:
    """Register the `log` sink."""
    register(LogSink())
