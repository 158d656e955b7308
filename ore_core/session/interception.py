"""Running one interceptor on an event of a stream: its notices are published, and a
failing interceptor drops the event with an error notice instead of stopping the stream."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING

import structlog

from ore_core import tracing
from ore_core.events import IngressEvent, NoticeEvent, Severity
from ore_core.session.protocols import Interceptor, InterceptResult

if TYPE_CHECKING:
    from ore_core.session.stream import Stream

__all__ = ["intercept"]

log = structlog.get_logger("ore.session")


async def intercept(
    interceptor: Interceptor,
    event: IngressEvent,
    stream: Stream,
) -> IngressEvent | None:
    """The event `interceptor` makes of `event` (None: dropped)."""
    try:
        work: Awaitable[InterceptResult] = interceptor.intercept(event, stream)
        if tracing.tracer is not None:
            work = tracing.child("ore.interceptor", work, {"ore.interceptor": interceptor.name})
        result = await work
    except Exception as exc:
        log.warning("interceptor failed", interceptor=interceptor.name, error=str(exc))
        stream.publish(
            NoticeEvent(
                content=f"{interceptor.name}: {exc}", severity=Severity.ERROR, context=event.context
            )
        )
        return None
    for notice in result.notices:
        if notice.content:
            stream.publish(
                NoticeEvent(content=notice.content, severity=notice.severity, context=event.context)
            )
    return result.event
