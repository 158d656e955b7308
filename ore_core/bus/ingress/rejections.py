"""Rejected ingress: logged, recorded on `P.dlq.REASON`, answered, acknowledged.

Bad input (protocol.md "Rejected input") is acknowledged at once, answered with an
`error` then `lifecycle: done` on `P.out.NS.T` when the subject is usable (a valid
namespace and thread id), logged, and recorded on `P.dlq.REASON` (the record is the
codec's `dead_letter`). Nothing a client sends stops a partition.
"""

from __future__ import annotations

import structlog
from nats.aio.msg import Msg

from ore_core._nats.codec import BAD_NAMESPACE, BAD_THREAD_ID, dead_letter
from ore_core.bus.egress.egress import Egress
from ore_core.bus.egress.pipeline import Pipeline
from ore_core.bus.ingress.acks import settle
from ore_core.bus.ingress.decoding import Rejected
from ore_core.events import ErrorEvent, LifecycleEvent
from ore_core.subjects import Subjects

__all__ = ["Rejections"]

log = structlog.get_logger("ore.bus")


class Rejections:
    """Handles the rejected messages of one Ingress."""

    def __init__(self, subjects: Subjects, pipeline: Pipeline, egress: Egress) -> None:
        self._subjects = subjects
        self._pipeline = pipeline
        self._egress = egress
        self._raw_inbound = subjects.prefix + ".in."  # for raw subject tokens
        self.counts: dict[str, int] = {}
        """Messages rejected so far, by reason (read by the metrics)."""

    async def reject(self, msg: Msg, namespace: str, thread_id: str, rejected: Rejected) -> None:
        """Log, record, answer (when the subject is usable) and acknowledge `msg`."""
        reason, detail = rejected.reason, rejected.detail
        self.counts[reason] = self.counts.get(reason, 0) + 1
        log.warning(
            "ingress message rejected",
            reason=reason,
            detail=detail,
            subject=msg.subject,
            thread_id=thread_id[:140],
        )
        record, headers = dead_letter(
            reason,
            detail,
            f"{self._raw_inbound}{namespace}.{thread_id}",
            namespace,
            thread_id,
            msg.data,
        )
        sequence = msg.metadata.sequence.stream
        await self._pipeline.publish(
            self._subjects.dlq(reason),
            record,
            headers,
            msg_id=f"{self._subjects.inbound_stream}-{sequence}",
        )
        if reason not in (BAD_THREAD_ID, BAD_NAMESPACE):
            context = rejected.context
            await self._egress.reply(
                namespace,
                thread_id,
                ErrorEvent(message=detail, code=reason, context=context),
                LifecycleEvent(phase="done", context=context),
            )
        await settle(msg.ack)
