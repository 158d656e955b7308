"""The `[plugins.nats]` settings of the bridge, validated once at start-up.

```toml
[plugins.nats]
prefix = "bridge"          # subjects bridge.<channel>.in / .out / .interrupt
output = "text"            # "text": the reply as the body; "json": {text, thread_id, in_reply_to}
request_timeout = 60       # seconds a request waits for the finished answer
durable = "nats-bridge"    # durable consumer: replies made while the bridge was down
max_bytes = 65536          # larger messages are refused with an error
```

Environment variables work too (`ORE_PLUGINS__NATS__OUTPUT=json`), and so does
`ore conduit nats --set output=json`.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator

from ore_core.conduit import ConduitConfig, DurableName

__all__ = ["NatsBridgeConfig", "OutputFormat"]

OutputFormat = Literal["text", "json"]

# Dot-separated NATS tokens without wildcards: the bridge appends `.<channel>.in`.
_PREFIX = re.compile(r"[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*")


class NatsBridgeConfig(ConduitConfig):
    """How the bridge names its subjects, formats replies and keeps its place."""

    prefix: str = "bridge"
    output: OutputFormat = "text"
    request_timeout: float = Field(default=60.0, gt=0)
    durable: DurableName = "nats-bridge"
    max_bytes: int = Field(default=64 * 1024, ge=1)

    @field_validator("prefix")
    @classmethod
    def _check_prefix(cls, prefix: str) -> str:
        if not _PREFIX.fullmatch(prefix):
            raise ValueError(
                "must be dot-separated tokens of letters, digits, _ and - (e.g. bridge)"
            )
        return prefix
