"""A queued event of a `Stream` and the callbacks that settle it (acknowledge, redeliver,
wake a `process()` caller), the COLLECT policy's merge of queued messages and the REJECT
policy's refusal."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from ore_core.errors import MessageRejected, OreError
from ore_core.events import (
    IngressEvent,
    LifecycleEvent,
    NoticeEvent,
    OutputEvent,
    Severity,
    UserMessageEvent,
)

__all__ = ["HandledCallback", "Pending", "RetryCallback", "collect", "reject"]

HandledCallback = Callable[[], object]
"""Called once the event is completely handled and saved (after `lifecycle: done`), or
was dropped on purpose (duplicate, rejected): the moment to acknowledge it upstream.
Not called for events failed by close() or an interrupt, so a bus redelivers them."""

RetryCallback = Callable[[OreError], object]
"""Called instead of `HandledCallback` when the event must be handled again later: the
store refused a stale copy (`StaleThread`: redeliver now, the thread is reloaded) or is
unavailable (a `StoreError`: redeliver after a delay). The stream is closed by then."""


@dataclass(slots=True)
class Pending:
    event: IngressEvent
    waiter: asyncio.Future[None] | None = None
    on_handled: HandledCallback | None = None
    on_retry: RetryCallback | None = None
    merged: tuple[Pending, ...] = ()  # later messages collected into this one

    def handled(self) -> None:
        for item in (self, *self.merged) if self.merged else (self,):
            item.on_retry = None
            if item.on_handled is not None:
                callback, item.on_handled = item.on_handled, None
                callback()

    def retry(self, error: OreError) -> None:
        for item in (self, *self.merged):
            item.on_handled = None
            if item.on_retry is not None:
                callback, item.on_retry = item.on_retry, None
                callback(error)

    def resolve(self, error: BaseException | None) -> None:
        if self.waiter is None and not self.merged:
            return  # submitted without a waiter: nobody to tell
        for item in (self, *self.merged):
            waiter = item.waiter
            if waiter is None or waiter.done():
                continue
            if error is None:
                waiter.set_result(None)
            else:
                waiter.set_exception(error)
                waiter.exception()  # a submit() caller may never look: not an error


def collect(item: Pending, queue: deque[Pending]) -> Pending:
    """`item` with the user messages queued right behind it merged into it (taken off
    `queue`), their texts joined by blank lines and their images and files kept in order: they
    are answered as one."""
    if not isinstance(item.event, UserMessageEvent):
        return item
    parts = [item.event.content]
    images = list(item.event.images)
    attachments = list(item.event.attachments)
    merged: list[Pending] = []
    while queue and isinstance(queue[0].event, UserMessageEvent):
        later = queue.popleft()
        assert isinstance(later.event, UserMessageEvent)
        parts.append(later.event.content)
        images.extend(later.event.images)
        attachments.extend(later.event.attachments)
        merged.append(later)
    if merged:
        item.merged = tuple(merged)
        update = {
            "content": "\n\n".join(parts),
            "images": tuple(images),
            "attachments": tuple(attachments),
        }
        item.event = item.event.model_copy(update=update)
    return item


def reject(item: Pending, publish: Callable[[OutputEvent], None], thread_id: str) -> None:
    """Refuse `item` (policy reject, a turn is running): the sender is told and gets its
    `done`, the message is acknowledged (not redelivered) and a waiter gets MessageRejected."""
    context = item.event.context
    publish(
        NoticeEvent(
            content="A reply is still being written; your message was not accepted. "
            "Wait for it, or interrupt it first.",
            severity=Severity.WARN,
            context=context,
        )
    )
    publish(LifecycleEvent.of("done", context))
    item.handled()
    item.resolve(MessageRejected(f"session {thread_id}: a turn is running (policy reject)"))
