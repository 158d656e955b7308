"""The control API's forwarding between workers: a request for a thread another worker
owns goes to that worker (on `P.worker.<id>.…`) and its reply comes back; a request
forwarded here is served by the endpoint of its original subject, never forwarded again."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Sequence

import structlog
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.errors import Error as NatsError
from nats.micro.request import Request

from ore_core.subjects import Subjects

__all__ = ["FORWARD_TIMEOUT", "Forwarding", "Served"]

log = structlog.get_logger("ore.bus")

FORWARD_TIMEOUT = 5.0  # seconds an owner has to answer a forwarded request

Served = Callable[..., Awaitable[None]]
"""An endpoint's handler: `await handler(request, forwarded: bool = False)`."""


class Forwarding:
    """Forwards requests to owner workers, and serves those forwarded to worker
    `worker_id` (None: a worker that is never forwarded to)."""

    __slots__ = ("_nc", "_subjects", "_subscription", "_worker")

    def __init__(self, nc: NatsClient, subjects: Subjects, worker_id: str | None) -> None:
        self._nc = nc
        self._subjects = subjects
        self._worker = None if worker_id is None else subjects.worker(worker_id)
        self._subscription: Subscription | None = None

    async def start(self, endpoints: Sequence[tuple[str, Served]]) -> None:
        """Serve requests forwarded here with `endpoints` (subject pattern, handler)."""
        if self._worker is not None:
            self._subscription = await self._nc.subscribe(
                self._worker + ".>", cb=functools.partial(self._on_forwarded, endpoints)
            )

    async def stop(self) -> None:
        """Serve no more forwarded requests. Idempotent."""
        subscription, self._subscription = self._subscription, None
        if subscription is not None:
            await subscription.unsubscribe()

    async def forward(self, request: Request, owner: str) -> bool:
        """Relay `request` to worker `owner` and its reply back; False when it did not
        answer (gone, or too slow): the caller then answers from the store."""
        prefix = self._subjects.prefix
        subject = self._subjects.worker(owner) + request.subject[len(prefix) :]
        try:
            reply = await self._nc.request(
                subject, request.data, timeout=FORWARD_TIMEOUT, headers=request.headers
            )
        except (NatsError, TimeoutError) as exc:
            log.debug("owner did not answer; answering here", owner=owner, error=repr(exc))
            return False
        await request.respond(reply.data, headers=reply.headers)
        return True

    async def _on_forwarded(self, endpoints: Sequence[tuple[str, Served]], msg: Msg) -> None:
        """A request another worker forwarded here (this worker owns its thread)."""
        assert self._worker is not None
        subject = self._subjects.prefix + msg.subject[len(self._worker) :]
        tokens = subject.split(".")
        for pattern_subject, handler in endpoints:
            pattern = pattern_subject.split(".")
            if len(pattern) == len(tokens) and all(
                p in ("*", t) for p, t in zip(pattern, tokens, strict=True)
            ):
                original = Msg(
                    self._nc, subject=subject, reply=msg.reply, data=msg.data, headers=msg.headers
                )
                await handler(Request(original), True)
                return
