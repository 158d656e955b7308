"""One classification of a homeserver's answers into the engine's failure classes.

`M_LIMIT_EXCEEDED` (or a 429) waits `retry_after_ms`; a 5xx, a lost connection or a
timeout is transient; a refusal says why (`M_FORBIDDEN`: permission, `M_TOO_LARGE`:
size, anything else the server will not do: unsupported) and is never retried.
"""

from __future__ import annotations

from typing import Any

from ore_core.conduit import FailureReason, PlatformError, RateLimited, Refused, Transient

__all__ = ["DEFAULT_WAIT", "classify"]

DEFAULT_WAIT = 5.0
"""Seconds to wait on a rate limit that names no `retry_after_ms`."""
_REASONS: dict[str, FailureReason] = {
    "M_FORBIDDEN": "refused_permission",
    "M_UNKNOWN_TOKEN": "refused_permission",
    "M_MISSING_TOKEN": "refused_permission",
    "M_GUEST_ACCESS_FORBIDDEN": "refused_permission",
    "M_TOO_LARGE": "refused_too_large",
}


def classify(call: str, response: Any) -> PlatformError:
    """The failure a nio error response stands for (`call` names it in the detail)."""
    status = getattr(getattr(response, "transport_response", None), "status", 0) or 0
    errcode = str(getattr(response, "status_code", "") or "")
    detail = f"{call}: {status} {errcode} {getattr(response, 'message', '')}".strip()
    if errcode == "M_LIMIT_EXCEEDED" or status == 429:
        retry_after_ms = getattr(response, "retry_after_ms", None)
        return RateLimited(detail, retry_after_ms / 1000 if retry_after_ms else DEFAULT_WAIT)
    if status >= 500 or status == 0:
        return Transient(detail)
    return Refused(detail, _REASONS.get(errcode, "refused_unsupported"))
