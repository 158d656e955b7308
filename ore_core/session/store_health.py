"""StoreHealth: whether the store can take saves, as the last saves and probes saw it.

A failed save (disk full, read-only, locked) is not the sender's fault and not the
end of the message: the stream drops its copy of the thread and the bus redelivers
the message later. Meanwhile the person waiting should hear once that the answer
is delayed (not once per redelivery), and an orchestrator should see the worker as
not ready. This object keeps exactly that state: which threads were told, and
whether the store is usable.

`/readyz` must say 503 exactly while a save would fail, so the outcome of the last real
save rules: a failed save is cleared only by a successful save (the worker retries the
parked message, so one comes). The periodic probe (a real write where the store can
afford one) finds a store that broke while no save ran, and clears only what it found
itself: a probe's one small write can pass while a save's larger one still fails (a
nearly full disk), and a probe passing between two failed saves must not say "ready".
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any

import structlog

from ore_core.errors import StoreError, ThreadCorrupt, ThreadExists, ThreadNotFound
from ore_core.session.latency import LatencyHistogram

__all__ = ["DELAYED_NOTICE", "StoreHealth", "is_store_failure", "store_probe"]

log = structlog.get_logger("ore.session")

DELAYED_NOTICE = "answer delayed: the store is unavailable, retrying"
"""The one notice a sender gets while its thread cannot be saved."""


def store_probe(store: Any) -> Callable[[], Awaitable[object]]:
    """The cheap call that tells whether `store` can be used now.

    A store may offer `check()` (a write probe: can it take a save now?); any other
    store is probed with a read (`list_ids(limit=1)`).
    """
    check = getattr(store, "check", None)
    if callable(check):
        return check  # type: ignore[no-any-return]
    return functools.partial(store.list_ids, limit=1)


def is_store_failure(error: BaseException) -> bool:
    """True for a store that could not do its job (I/O, lock, read-only): worth a retry.

    Not for a missing, existing or corrupt thread, or a refused stale save: those are
    answers about the data, and retrying would give the same answer (or, for a stale
    save, needs a reload, not a wait).
    """
    return isinstance(error, StoreError) and not isinstance(
        error, ThreadCorrupt | ThreadExists | ThreadNotFound
    )


class StoreHealth:
    """Usable or not, the last failure, and the threads told that their answer waits."""

    def __init__(self) -> None:
        self.usable = True
        self.error = ""
        self.failures = 0
        """Saves that failed so far (read by the metrics)."""
        self.save_seconds = LatencyHistogram()
        """How long the saves that worked took (read by the metrics)."""
        self._told: set[str] = set()
        self._save_failed = False  # a save failed and none succeeded since

    def failed(self, thread_id: str, error: BaseException) -> bool:
        """A save of `thread_id` failed; True when its sender has not been told yet."""
        self.failures += 1
        if self.usable:
            log.error("store unavailable; messages are retried", error=str(error))
        self.usable = False
        self._save_failed = True
        self.error = str(error)
        if thread_id in self._told:
            return False
        self._told.add(thread_id)
        return True

    def saved(self, thread_id: str, seconds: float) -> None:
        """A save of `thread_id` worked in `seconds`: the store is usable again (cheap
        when nothing failed)."""
        self.save_seconds.observe(seconds)
        if not self.usable or self._told:
            self._told.discard(thread_id)
            self._recovered()

    def _recovered(self) -> None:
        if not self.usable:
            log.info("store usable again")
        self.usable = True
        self._save_failed = False
        self.error = ""

    async def probe(self, check: Callable[[], Awaitable[object]]) -> bool:
        """Run `check` (a cheap store call that must succeed); record and return the outcome.

        A passing probe makes the store usable again only when no save failed since the
        last successful one (see the module's docstring)."""
        try:
            await check()
        except Exception as exc:
            if self.usable:
                log.error("store probe failed", error=str(exc))
            self.usable = False
            self.error = str(exc)
            return False
        if not self.usable and not self._save_failed:
            self._recovered()
        return True
