"""ore-guard: an interceptor that rate-limits senders and redacts secrets.

Installed, it is enabled through its `ore` entry point; configure it in the
`[plugins.guard]` table (see `GuardConfig`). It is also the worked example of
docs/writing-an-interceptor.md.
"""

from ore_guard.config import GuardConfig, GuardConfigError
from ore_guard.interceptor import GuardInterceptor, sender_key
from ore_guard.ratelimit import RateLimiter
from ore_guard.redact import DEFAULT_PATTERNS, Redaction, Redactor, marker

__all__ = [
    "DEFAULT_PATTERNS",
    "GuardConfig",
    "GuardConfigError",
    "GuardInterceptor",
    "RateLimiter",
    "Redaction",
    "Redactor",
    "marker",
    "sender_key",
]
