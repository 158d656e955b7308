"""PermissionWatch: a refused publish or subscribe becomes an exception, not a timeout.

NATS reports a subject the user may not use as an `-ERR` on the connection, not as a
reply: without this watch a refused request just times out and a refused
subscription stays silent. The client feeds every connection error to `observe`;
calls wrapped in `guard` fail with `PermissionDenied` as soon as the server refuses
their subject, and `watch_subscription` callbacks hear about refused subscriptions
(which the server may report a little after a flush).
"""

from __future__ import annotations

import asyncio
import re
from collections import defaultdict
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from ore_core.bus.errors import PermissionDenied

__all__ = ["PermissionWatch"]

_T = TypeVar("_T")
_VIOLATION = re.compile(r'permissions violation for (publish|subscription) to "([^"]+)"', re.I)

RefusalCallback = Callable[[PermissionDenied], object]


class PermissionWatch:
    """Matches the server's permission errors to the calls that caused them.

    One per connection; every method runs on the connection's event loop. nats-py
    lowercases server errors, so subjects are compared lowercased.
    """

    def __init__(self) -> None:
        self._publishers: defaultdict[str, set[asyncio.Future[None]]] = defaultdict(set)
        self._subscribers: defaultdict[str, list[RefusalCallback]] = defaultdict(list)

    def observe(self, error: Exception) -> bool:
        """Dispatch `error` if it is a permission violation; True when it was one."""
        match = _VIOLATION.search(str(error))
        if match is None:
            return False
        action, subject = match.groups()
        key = subject.lower()
        if action.lower() == "subscription":
            for callback in list(self._subscribers.get(key, ())):
                callback(PermissionDenied("subscribe to", subject))
            return True
        for waiter in self._publishers.get(key, ()):
            if not waiter.done():
                waiter.set_result(None)
        return True

    def watch_subscription(self, subject: str, on_refused: RefusalCallback) -> Callable[[], None]:
        """Call `on_refused` if the server refuses a subscription to `subject`; unwatch."""
        key = subject.lower()
        self._subscribers[key].append(on_refused)

        def unwatch() -> None:
            callbacks = self._subscribers.get(key, [])
            if on_refused in callbacks:
                callbacks.remove(on_refused)
            if not callbacks:
                self._subscribers.pop(key, None)

        return unwatch

    async def guard(self, subject: str, call: Awaitable[_T]) -> _T:
        """Await `call` (which publishes to `subject`); PermissionDenied if it is refused."""
        refused: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        key = subject.lower()
        waiters = self._publishers[key]
        waiters.add(refused)
        task = asyncio.ensure_future(call)
        either: set[asyncio.Future[Any]] = {task, refused}
        try:
            await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiters.discard(refused)
            if not waiters:
                self._publishers.pop(key, None)
            if not task.done():
                task.cancel()
        if refused.done():
            if task.done() and not task.cancelled():
                task.exception()  # the refusal is the error worth reporting
            raise PermissionDenied("publish to", subject)
        return task.result()
