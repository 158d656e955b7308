"""Inbound: a platform's events to the core, one conversation at a time, confirmed after.

Each conversation has a lane: its events reach the core in the order the platform
gave them, while a slow conversation never holds up another (`SerialByKey`). An event
is confirmed to the platform (`Inbound.done()`: an offset, an envelope ack, a sync
token) only once the core acknowledged it, so a crash before that gets it again; the
platform's id is the event id, so the repeat is stored once.

`Forwarder` says each event in the core's words: a `Message` is sent, an `Edit` is
the core's edit of the message it names, a `Delete` the core's delete, a `Command` the
command's text (`/name args`, which the core reads like a typed one), except `stop`,
the core's interrupt, a `Reaction` the core's react on the turn its target shows (an
answer or a copy this conduit posted, found in `Posted`, else the message the target
names).
"""

from __future__ import annotations

import asyncio
import re
import secrets
from collections.abc import Awaitable, Callable

import structlog

from ore_core.conduit.client import ConduitClient, Sent
from ore_core.conduit.platform import Command, Delete, Edit, Inbound, Message, Reaction
from ore_core.conduit.posted import Posted
from ore_core.events import EventContext, UserMessageEvent
from ore_core.tasks import TaskScope

__all__ = ["Forwarder", "SerialByKey", "derived_traceparent"]

log = structlog.get_logger("ore.conduit.inbound")

_TRACEPARENT = re.compile(r"00-(?P<trace>[0-9a-f]{32})-[0-9a-f]{16}-(?P<flags>[0-9a-f]{2})")

_Job = Callable[[], Awaitable[None]]


class SerialByKey:
    """Runs jobs with the same key one after another, in the order they were submitted.

    Jobs of different keys run concurrently. The jobs are tasks of `tasks`, spawned as
    jobs (`critical=False`): one that fails is logged with its name and the others go
    on; closing the scope cancels and awaits them all.
    """

    def __init__(self, tasks: TaskScope, name: str = "lane") -> None:
        self._tasks = tasks
        self._name = name
        self._last: dict[str, asyncio.Task[None]] = {}

    def submit(self, key: str, job: _Job) -> None:
        """Queue `job` behind the jobs already queued for `key`."""
        task = self._tasks.spawn(
            self._after(self._last.get(key), job), name=f"{self._name}-{key}", critical=False
        )
        self._last[key] = task
        task.add_done_callback(lambda done: self._forget(key, done))

    @staticmethod
    async def _after(previous: asyncio.Task[None] | None, job: _Job) -> None:
        if previous is not None:
            await asyncio.wait([previous])
        await job()

    def _forget(self, key: str, task: asyncio.Task[None]) -> None:
        if self._last.get(key) is task:
            del self._last[key]


class Forwarder:
    """Says one inbound event to the core (see the module docstring); `name` is the
    conduit's, the provenance of what it sends; `posted` what this process posted."""

    def __init__(self, client: ConduitClient, name: str, posted: Posted | None = None) -> None:
        self.client = client
        self.name = name
        self.posted = posted or Posted(client)

    async def forward(
        self, thread_id: str, inbound: Inbound, *, traceparent: str = ""
    ) -> Sent | None:
        """Send `inbound` to the thread; what the core acknowledged (None: nothing to
        send). Confirming it to the platform is the caller's, after this returns."""
        client = self.client
        if isinstance(inbound, Message):
            return await client.send(thread_id, self.message(inbound, traceparent))
        if isinstance(inbound, Edit):
            context = self.context(inbound.sender.id, inbound.sender.name, traceparent)
            return await client.edit(
                thread_id, inbound.target, inbound.text, id=inbound.platform_id, context=context
            )
        if isinstance(inbound, Delete):
            return await client.delete(thread_id, inbound.target, id=inbound.platform_id)
        if isinstance(inbound, Reaction):
            return await self.react(thread_id, inbound, traceparent)
        if isinstance(inbound, Command) and inbound.name == "stop":
            # Stop is no command the core reads: it is the interrupt every conduit sends.
            return await client.interrupt(thread_id, id=inbound.platform_id)
        if isinstance(inbound, Command):
            text = f"/{inbound.name} {inbound.args}".rstrip()
            command = Message(
                conversation=inbound.conversation,
                platform_id=inbound.platform_id,
                sender=inbound.sender,
                text=text,
            )
            return await client.send(thread_id, self.message(command, traceparent))
        log.debug("inbound event not forwarded", kind=type(inbound).__name__)
        return None

    async def react(self, thread_id: str, inbound: Reaction, traceparent: str = "") -> Sent:
        """The core's react for a reaction on `inbound.target`: on an answer or a copy this
        conduit posted, the turn it shows; else the message itself (its id is the event
        id)."""
        found = await self.posted.lookup(inbound.target)
        turn = found[1] if found is not None else inbound.target
        return await self.client.react(
            thread_id,
            turn,
            inbound.emoji,
            remove=inbound.removed,
            id=inbound.platform_id,
            context=self.context(inbound.sender.id, inbound.sender.name, traceparent),
        )

    def message(self, inbound: Message, traceparent: str = "") -> UserMessageEvent:
        """The core's event for a user message: its platform id is the event id."""
        metadata = {"reply_to": inbound.reply_to} if inbound.reply_to else {}
        return UserMessageEvent(
            id=inbound.platform_id,
            content=inbound.text,
            attachments=inbound.attachments,
            metadata=metadata,
            context=self.context(inbound.sender.id, inbound.sender.name, traceparent),
        )

    def context(self, user: str, user_name: str, traceparent: str = "") -> EventContext:
        """The context of an event the conduit sends for `user`."""
        return EventContext(
            provenance=self.name, user=user, user_name=user_name, traceparent=traceparent
        )


def derived_traceparent(parent: str = "") -> str:
    """A W3C traceparent for the conduit's span of one inbound event.

    It continues `parent` (the sender's traceparent, where the platform carries one)
    when it is valid, else starts a trace that is not sampled (the conduit records no
    spans itself). The span id is always new, so it also tells the events of one
    message apart: the core's answer to it carries it.
    """
    found = _TRACEPARENT.fullmatch(parent.strip())
    trace = found["trace"] if found else secrets.token_hex(16)
    flags = found["flags"] if found else "00"
    return f"00-{trace}-{secrets.token_hex(8)}-{flags}"
