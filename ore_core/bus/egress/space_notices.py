"""What a thread's users hear while a JetStream limit holds its answer back (the
`Pipeline`'s limit listeners): told once, until the limit clears."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from ore_core.events import ErrorEvent, OutputEvent
from ore_core.subjects import DEFAULT_NAMESPACE, Subjects

__all__ = ["STORAGE_FULL", "SpaceNotices"]

STORAGE_FULL = "storage_full"
"""`code` of the error event a user gets while a JetStream limit holds their answer."""

Reply = Callable[..., Awaitable[None]]
"""`await reply(namespace, thread_id, *events)`: `Egress.reply`."""


class SpaceNotices:
    """Tells each thread whose stored batch is held once that its answer waits for space."""

    __slots__ = ("_events_prefix", "_reply", "_subjects", "_told")

    def __init__(self, subjects: Subjects, reply: Reply) -> None:
        self._subjects = subjects
        self._reply = reply
        self._events_prefix = f"{subjects.prefix}.ev."
        self._told: set[str] = set()  # threads told that their answer waits for space

    async def reached(self, subject: str, reason: str) -> None:
        """A stored batch of a thread is held by a JetStream limit: tell its users once."""
        if not subject.startswith(self._events_prefix):
            return  # a dead-letter record: the operator's log line is enough
        namespace, thread_id = self._subjects.thread_of(subject)
        if thread_id in self._told:
            return
        self._told.add(thread_id)
        message = (
            f"ore cannot store its answer right now: a JetStream limit of the NATS server "
            f"is reached ({reason}). Nothing is lost: the answer follows once the operator "
            "frees space"
        )
        event: OutputEvent = ErrorEvent(message=message, code=STORAGE_FULL)
        await self._reply(namespace or DEFAULT_NAMESPACE, thread_id, event)

    def cleared(self) -> None:
        """The limit freed: a thread held again is told again."""
        self._told.clear()
