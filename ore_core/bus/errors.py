"""Errors of the NATS bus, as a conduit sees them.

`ApiError` carries the control API's answer (protocol.md "Control API"); `BusError`
is everything that went wrong on the way (timeouts, no core running, a closed
connection); `PermissionDenied` names the subject the NATS server refused.
"""

from __future__ import annotations

from ore_core.errors import OreError

__all__ = ["ApiError", "BusError", "PermissionDenied"]


class BusError(OreError):
    """Talking to NATS failed; the message names the subject and what to check."""


class PermissionDenied(BusError):
    """The NATS server refused to let this connection publish or subscribe to `subject`."""

    def __init__(self, action: str, subject: str) -> None:
        super().__init__(
            f"NATS refused to let this connection {action} {subject!r}: "
            "grant it in the user's permissions (see docs/writing-a-conduit.md)"
        )
        self.action = action
        self.subject = subject


class ApiError(OreError):
    """The control API refused a request.

    `status` is the numeric code of the `Nats-Service-Error-Code` header (400, 404,
    409, 413, 500), `code` the word from the JSON body (`bad_request`, `not_found`,
    `conflict`, `too_large`, `internal`) and `message` what the service said.
    """

    def __init__(self, status: int, code: str, message: str, *, subject: str = "") -> None:
        where = f" ({subject})" if subject else ""
        super().__init__(f"{code} [{status}]{where}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.subject = subject
