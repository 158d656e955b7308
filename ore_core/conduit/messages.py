"""The messages a conduit sends into a thread (`ConduitClient`'s "messages in"): a user
message, an interrupt, and the bridging operations on a recorded message (edit, delete,
regenerate), each one ingress event published with the platform's id."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, TypeVar

from ore_core.events import (
    DeleteEvent,
    EditEvent,
    EventContext,
    InterruptEvent,
    RegenerateEvent,
    UserMessageEvent,
    new_event_id,
)

if TYPE_CHECKING:
    from ore_core.conduit.client import Sent

__all__ = ["Ingress", "MessagesIn"]

Ingress = TypeVar(
    "Ingress", UserMessageEvent, InterruptEvent, DeleteEvent, EditEvent, RegenerateEvent
)
"""An ingress event a conduit publishes."""


class MessagesIn:
    """Builds each ingress event; `ConduitClient` publishes it (`_publish`)."""

    namespace: str
    _context: EventContext

    async def _publish(self, thread_id: str, event: Ingress) -> Sent:
        raise NotImplementedError

    async def send(
        self,
        thread_id: str,
        message: str | UserMessageEvent,
        *,
        id: str | None = None,
        user: str | None = None,
        user_name: str | None = None,
        answer: bool = True,
        images: Sequence[str] = (),
    ) -> Sent:
        """Send a user message to the thread (created on first message if unknown).

        Pass the platform's message id as `id`: a message sent twice with one id is
        stored once (`Sent.duplicate` says so). Retries (timeouts, reconnects, core
        not started yet) reuse the id, for up to `send_deadline` seconds. The event's
        provenance is the namespace (the core refuses any other). `user_name` is the
        sender's display name: linked endpoints label the relayed message with it.
        `answer` false records the message without asking the processor. `images` are
        `data:image/...;base64,` or http(s) URLs (see UserMessageEvent); the whole
        event must fit the core's ingress limit (`nats.max_payload`): a larger one
        raises ApiError 413 `too_large` at once.
        """
        if isinstance(message, UserMessageEvent):
            named = (id, user, user_name)
            if any(value is not None for value in named) or not answer or images:
                raise ValueError(
                    "set id, user, user_name, answer and images on the UserMessageEvent itself"
                )
            event = message
        else:
            event = UserMessageEvent(
                id=id or new_event_id(),
                content=message,
                answer=answer,
                images=tuple(images),
                context=self._sender(user, user_name),
            )
        return await self._publish(thread_id, event)

    async def edit(
        self,
        thread_id: str,
        turn_id: str,
        content: str,
        *,
        id: str | None = None,
        user: str | None = None,
        user_name: str | None = None,
        answer: bool = True,
        images: Sequence[str] = (),
        context: EventContext | None = None,
    ) -> Sent:
        """The user edited the message recorded as `turn_id` (its turn id, or the id it
        was sent with: the platform's message id) to `content`. The core interrupts
        what runs, records the new text and tells every endpoint, whose copies are
        edited in place; an edit of the latest message is answered again (unless
        `answer` is false), an older one's on a linked thread is not (docs/bridging.md).
        Pass the platform's id of this edit as `id` (stored once). `context` replaces
        the one made of `user` and `user_name` (a conduit's traceparent, say)."""
        event = EditEvent(
            id=id or new_event_id(),
            turn_id=turn_id,
            content=content,
            answer=answer,
            images=tuple(images),
            context=context or self._sender(user, user_name),
        )
        return await self._publish(thread_id, event)

    async def regenerate(
        self,
        thread_id: str,
        turn_id: str,
        *,
        id: str | None = None,
        user: str | None = None,
        user_name: str | None = None,
        context: EventContext | None = None,
    ) -> Sent:
        """Answer the user message `turn_id` (it, one of its answers, or the id it was
        sent with) again: a sibling answer under the same question; nothing is relayed
        as a new user message. Pass the platform's id of the request as `id`; `context`
        replaces the one made of `user` and `user_name`."""
        event = RegenerateEvent(
            id=id or new_event_id(),
            turn_id=turn_id,
            context=context or self._sender(user, user_name),
        )
        return await self._publish(thread_id, event)

    def _sender(self, user: str | None, user_name: str | None) -> EventContext:
        if not (user or user_name):
            return self._context
        return EventContext(provenance=self.namespace, user=user or "", user_name=user_name or "")

    async def interrupt(self, thread_id: str, *, id: str | None = None) -> Sent:
        """Cancel the turn in flight on the thread and drop its queued messages."""
        event = InterruptEvent(id=id or new_event_id(), context=self._context)
        return await self._publish(thread_id, event)

    async def delete(self, thread_id: str, turn_id: str, *, id: str | None = None) -> Sent:
        """The user deleted the message recorded as `turn_id` (its turn id, or the id it
        was sent with: the platform's message id; bridging): the core keeps
        it as a tombstone the model no longer sees, and linked endpoints delete their
        copies. Pass the platform's id of the deletion as `id` (stored once)."""
        event = DeleteEvent(id=id or new_event_id(), turn_id=turn_id, context=self._context)
        return await self._publish(thread_id, event)
