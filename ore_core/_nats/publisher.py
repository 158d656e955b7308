"""AckedPublisher: JetStream publishes that wait for their ack, at the cost of one future.

nats-py's `JetStreamContext.publish` goes through the connection's request machinery:
a random token (an `os.urandom` call), a future with a done-callback, `wait_for` (a
second future, callbacks and a timer), and a dataclass built from the ack's JSON. A
conduit publishes every user message this way, and `ConduitClient.send` used to race
it against a permission refusal in a task of its own. Here one publish is one future
(resolved by the ack, the timeout or a refusal, whichever comes first), and one timer
serves every publish waiting. Acks arrive on one wildcard inbox of the connection
(`_INBOX_NS.<nuid>.*`, which a conduit's NATS user may read), subscribed by `start`
(or the first publish), handled inline by the read loop and read by
`codec.read_publish_ack`.
Publishes from many tasks are pipelined: nothing waits for an earlier ack.

A publish goes out through `wire.publish_now` (nats-py's checks, bytes and flusher
wake-up without its coroutine chain), with a header block the caller may build once
per message from pre-encoded parts (`publish_encoded`): nats-py's `publish` encodes
every header through a regex, a strip, a translate and four buffer extends.

Concurrency: one publisher per connection, used from the connection's event loop.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import TYPE_CHECKING

from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.errors import TimeoutError as NatsTimeoutError

from ore_core._nats.connection import PermissionWatch, subscribe_inline

if TYPE_CHECKING:
    from ore_core._nats.codec import Ack

__all__ = ["AckedPublisher"]


class AckedPublisher:
    """Publishes to JetStream subjects of one connection and waits for each ack.

    `publish` raises what `JetStreamContext.publish` raises for the same failure:
    nats' TimeoutError when no ack came in time, NoStreamResponseError when no stream
    takes the subject, APIError when JetStream refused the message, the connection's
    errors (reconnecting, buffer full, closed) as nats-py raises them, and
    PermissionDenied as soon as the server refuses the subject.
    """

    def __init__(self, nc: NatsClient, permissions: PermissionWatch, ack_wait: float) -> None:
        # Imported by the first publisher, not with the SDK: `import ore_core.conduit`
        # stays as small as tests/project/test_public_surface.py holds it.
        from ore_core._nats import codec, wire

        self._read_ack = codec.read_publish_ack

        self._header_block = wire.header_block
        self._publish_now = wire.publish_now
        self._wait_flushed = wire.wait_flushed
        self._nc = nc
        self._ack_wait = ack_wait
        self._permissions = permissions
        self._pending: dict[str, asyncio.Future[Msg]] = {}
        # Every publish waits `ack_wait`, so deadlines come in publish order: one timer,
        # for the oldest, serves all (a timer per publish was a tenth of a send's cost).
        self._deadlines: deque[tuple[float, asyncio.Future[Msg]]] = deque()
        self._timer: asyncio.TimerHandle | None = None
        self._inbox: str | None = None
        self._subscribing: asyncio.Lock | None = None
        self._next = 0

    @property
    def pending(self) -> int:
        """Publishes waiting for their ack."""
        return len(self._pending)

    async def start(self) -> None:
        """Subscribe the acks' inbox now rather than at the first publish.

        Its nats-py task belongs to the connection: made from a conduit's own task, it
        would look like that task's leftover.
        """
        await self._subscribe()

    async def publish(self, subject: str, payload: bytes, headers: dict[str, str]) -> Ack:
        """Publish `payload` to `subject` and return JetStream's ack within `ack_wait` s."""
        return await self.publish_encoded(subject, payload, self._header_block(headers))

    async def publish_encoded(self, subject: str, payload: bytes, header: bytes) -> Ack:
        """`publish` with the header block already written (`header_block`'s bytes).

        `subject` must be free of whitespace (ore's subjects are built from checked
        tokens; a subject with whitespace raises BadSubjectError as in nats-py).
        """
        inbox = self._inbox or await self._subscribe()
        self._next += 1
        token = str(self._next)
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[Msg] = loop.create_future()
        self._pending[token] = answer
        self._permissions.watch_publish(subject, answer)
        deadline = loop.time() + self._ack_wait
        self._deadlines.append((deadline, answer))
        if self._timer is None:
            self._timer = loop.call_at(deadline, self._expire)
        try:
            if self._publish_now(self._nc, subject, payload, inbox + token, header):
                await self._wait_flushed(self._nc)  # over the pending limit: backpressure
            msg = await answer
        finally:
            self._permissions.forget_publish(subject, answer)
            del self._pending[token]
            answer.cancel()  # a no-op once answered; else nothing may answer it any more
            deadlines = self._deadlines
            while deadlines and deadlines[0][1].done():
                deadlines.popleft()
        return self._read_ack(msg)

    def _expire(self) -> None:
        """Fail the publishes past their deadline; set the timer for the next one."""
        self._timer = None
        loop = asyncio.get_running_loop()
        now = loop.time()
        deadlines = self._deadlines
        while deadlines:
            deadline, answer = deadlines[0]
            if not answer.done():
                if deadline > now:
                    self._timer = loop.call_at(deadline, self._expire)
                    return
                answer.set_exception(NatsTimeoutError())
            deadlines.popleft()

    async def _subscribe(self) -> str:
        """The acks' wildcard inbox, subscribed once (concurrent first publishes wait)."""
        if self._subscribing is None:
            self._subscribing = asyncio.Lock()
        async with self._subscribing:
            if self._inbox is None:
                inbox = self._nc.new_inbox() + "."
                await subscribe_inline(self._nc, inbox + "*", self._on_ack)
                self._inbox = inbox
        return self._inbox

    def _on_ack(self, msg: Msg) -> None:
        assert self._inbox is not None
        answer = self._pending.get(msg.subject[len(self._inbox) :])
        if answer is not None and not answer.done():
            answer.set_result(msg)
