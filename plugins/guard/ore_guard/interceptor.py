"""GuardInterceptor: rate-limit senders and redact secrets before anything else sees them.

It runs first (`order = -100`, before slash commands at 0), so a redacted message is
what the user turn, the store, the model and every later interceptor get. Only user
messages are touched; interrupts and session switches pass through unchanged.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING

import structlog

from ore_core import IngressEvent, InterceptResult, Notice, Severity, UserMessageEvent
from ore_guard.config import GuardConfig
from ore_guard.ratelimit import Clock, RateLimiter
from ore_guard.redact import Redaction, Redactor

if TYPE_CHECKING:
    from ore_core import Stream

__all__ = ["GuardInterceptor", "sender_key"]

log = structlog.get_logger("ore.guard")


def sender_key(event: UserMessageEvent, thread_id: str) -> tuple[str, str, str]:
    """Who a rate limit applies to: the platform user of a conduit, else the thread.

    Conduits that cannot name a user (a raw bus bridge, a script) share one bucket
    per thread (the thread limits), so an anonymous sender still cannot flood a
    conversation.
    """
    context = event.context
    if context.user:
        return (context.provenance, "user", context.user)
    return (context.provenance, "thread", thread_id)


class GuardInterceptor:
    """Per-sender rate limiting, then secret redaction, for every user message.

    A message over the limit is consumed with a Warn notice saying when to retry; it
    takes no token, is not stored and never reaches the model. A message containing
    secrets continues with each one replaced by `[REDACTED:<name>]`, and the sender
    gets an Info notice naming the kinds found (never the secret itself).

    One instance serves every stream of a Manager; call it from the Manager's loop.
    """

    name: str = "guard"
    order: int = -100

    def __init__(self, config: GuardConfig | None = None, *, clock: Clock = time.monotonic) -> None:
        self.config = config = config if config is not None else GuardConfig()
        self._limiters = (
            {
                "user": RateLimiter(
                    config.rate, config.per, config.burst, max_keys=config.max_senders, clock=clock
                ),
                "thread": RateLimiter(
                    config.thread_rate,
                    config.per,
                    config.thread_burst,
                    max_keys=config.max_senders,
                    clock=clock,
                ),
            }
            if config.rate_limit
            else None
        )
        self._redactor = Redactor(self.config.redaction_patterns()) if self.config.redact else None

    async def intercept(self, event: IngressEvent, stream: Stream) -> InterceptResult:
        """Consume a message over the limit; pass others on, redacted where needed."""
        if not isinstance(event, UserMessageEvent):
            return InterceptResult(event)
        if self._limiters is not None:
            key = sender_key(event, stream.id)
            limiter = self._limiters[key[1]]
            wait = limiter.acquire(key)
            if wait > 0:
                log.info("guard.rate_limited", thread_id=stream.id, event_id=event.id)
                return InterceptResult(None, [_too_fast(limiter, wait)])
        if self._redactor is None:
            return InterceptResult(event)
        redaction = self._redactor.redact(event.content)
        if not redaction.changed:
            return InterceptResult(event)
        log.info(
            "guard.redacted", thread_id=stream.id, event_id=event.id, patterns=redaction.counts
        )
        redacted = event.model_copy(update={"content": redaction.text})
        return InterceptResult(redacted, [_redacted_notice(redaction)])

    def describe(self) -> str:
        """The limits in one line: `ore serve`, `ore chat` and `ore config` show it."""
        return self.config.describe()


def _too_fast(limiter: RateLimiter, wait: float) -> Notice:
    return Notice(
        f"You are sending messages too fast (limit: {limiter.rate} per {limiter.per:g} s, "
        f"{limiter.burst} at once); this one was not delivered. "
        f"Try again in {math.ceil(wait)} s.",
        Severity.WARN,
    )


def _redacted_notice(redaction: Redaction) -> Notice:
    found = ", ".join(
        name if count == 1 else f"{name} (x{count})" for name, count in redaction.counts.items()
    )
    return Notice(
        f"Removed secrets from your message before it was stored or sent to the model: "
        f"{found}. They were still sent over chat: rotate them.",
        Severity.INFO,
    )
