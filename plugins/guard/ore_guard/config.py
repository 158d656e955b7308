"""The `[plugins.guard]` settings, validated once at start-up.

```toml
[plugins.guard]
rate_limit = true   # per-sender token bucket
rate = 60           # messages ...
per = 60            # ... per this many seconds, sustained
burst = 20          # messages a sender may send at once
thread_rate = 120   # the same, for a thread whose conduit names no user ...
thread_burst = 40   # ... (everyone writing there shares one bucket)
redact = true       # replace secrets before the model or the store sees them

[plugins.guard.patterns]        # added to DEFAULT_PATTERNS; same name replaces one
internal_token = "itk_[a-z0-9]{32}"
openai_key = ""                 # an empty pattern switches a default off
```

Environment variables work too (`ORE_PLUGINS__GUARD__RATE=5`). A bad value fails at
start-up with `GuardConfigError` naming the key (and, for a pattern, its name).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ore_core import OreError, describe_validation_error
from ore_guard.redact import DEFAULT_PATTERNS

__all__ = ["PLUGIN_NAME", "GuardConfig", "GuardConfigError"]

PLUGIN_NAME = "guard"
"""The plugin's name: its entry point and its `[plugins.<name>]` settings table."""

_PATTERN_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")


class GuardConfigError(OreError):
    """The `[plugins.guard]` settings are invalid; the message names the key to fix."""


class GuardConfig(BaseModel):
    """Validated settings of one `GuardInterceptor`.

    A sender may send `burst` messages at once and `rate` per `per` seconds after that:
    20 at once and one a second by default, so a person typing fast, pasting several
    lines or answering in quick bursts is never stopped, while a runaway script is.
    A thread whose conduit names no user (the NATS bridge, raw clients) has one bucket
    for everyone writing in it, so it gets `thread_burst` and `thread_rate`: twice a
    person's by default, for a busy group thread. `max_senders` bounds the memory the
    rate limiter uses: past it, the sender seen least recently is forgotten (and
    starts again with a full bucket).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    rate_limit: bool = True
    rate: int = Field(default=60, ge=1)
    per: float = Field(default=60.0, gt=0)
    burst: int = Field(default=20, ge=1)
    thread_rate: int = Field(default=120, ge=1)
    thread_burst: int = Field(default=40, ge=1)
    max_senders: int = Field(default=10_000, ge=1)
    redact: bool = True
    patterns: dict[str, str] = Field(default_factory=dict)

    @field_validator("patterns")
    @classmethod
    def _check_patterns(cls, patterns: dict[str, str]) -> dict[str, str]:
        for name, source in patterns.items():
            if not _PATTERN_NAME.fullmatch(name):
                raise ValueError(
                    f"pattern name {name!r} must be 1-64 letters, digits, '_', '.' or '-'"
                )
            if source:
                _compile(name, source)
        return patterns

    @classmethod
    def load(cls, section: Mapping[str, Any] | None = None) -> GuardConfig:
        """Validate a `[plugins.guard]` table; raise `GuardConfigError` naming what is wrong."""
        try:
            return cls.model_validate(dict(section or {}))
        except ValidationError as exc:
            problems = describe_validation_error(
                exc, whole="section", known_keys=GuardConfig.model_fields
            )
            raise GuardConfigError(
                f"invalid [plugins.{PLUGIN_NAME}] settings: {problems}"
            ) from None

    def describe(self) -> str:
        """The limits in one line, for start-up lines and `ore config`."""
        secrets = "redacting secrets" if self.redact else "not redacting secrets"
        if not self.rate_limit:
            return f"no rate limit; {secrets}"
        return (
            f"per sender {self.burst} at once, then {self.rate} per {self.per:g} s; "
            f"per thread without a user {self.thread_burst}, then {self.thread_rate}; {secrets}"
        )

    def redaction_patterns(self) -> dict[str, re.Pattern[str]]:
        """The defaults, then the configured patterns (an empty one removes its name)."""
        merged = {**DEFAULT_PATTERNS, **self.patterns}
        return {name: _compile(name, source) for name, source in merged.items() if source}


def _compile(name: str, source: str) -> re.Pattern[str]:
    try:
        pattern = re.compile(source)
    except re.error as exc:
        raise ValueError(f"pattern {name!r} is not a valid regular expression: {exc}") from None
    if pattern.fullmatch(""):
        # Almost always a slip (`*` for `+`, an optional group) that would redact too much.
        raise ValueError(f"pattern {name!r} matches the empty string; make it match something")
    return pattern
