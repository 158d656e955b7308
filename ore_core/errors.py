"""One exception hierarchy for everything ore raises on purpose.

Catch `OreError` to handle any of them; the subclasses say what went wrong and the
messages say what to do next (they name the thread id, the kind, the file).
"""

from __future__ import annotations


class OreError(Exception):
    """Base class of every error ore raises deliberately."""


class ArtifactError(OreError):
    """An artifact could not be encoded or decoded (a delta persisted, bad data)."""


class LedgerError(OreError):
    """A ledger operation was refused (unknown turn, bad journal, locked file)."""


class TurnNotFound(LedgerError):
    """A turn id named by the caller is not in the thread."""


class JournalLocked(LedgerError):
    """Another process holds the journal of this thread open for writing."""


class InvalidThreadId(OreError, ValueError):
    """A thread id from outside is unsafe or malformed (path-like, too long, bad chars)."""


class StoreError(OreError):
    """A store could not do what was asked."""


class ThreadNotFound(StoreError, LookupError):
    """No thread with this id (or metadata key/value) exists in the store."""


class ThreadCorrupt(StoreError):
    """The stored thread exists but cannot be read; the message names the cause."""


class ThreadExists(StoreError):
    """A thread with this id already exists; creating it again would overwrite it."""


class SessionClosed(OreError):
    """The stream (session) was closed; it accepts no more events."""


class Interrupted(OreError):
    """The event was dropped because an interrupt cleared the queue before it ran."""


class SessionNotFound(OreError, LookupError):
    """No active stream for this thread id in the manager (attach it first)."""


class TurnFailed(OreError):
    """Handling an event failed; the message says why (the cause is chained)."""


class TurnCancelled(OreError):
    """The turn was cancelled (interrupt, cancel() or close) before it finished."""


class MessageRejected(OreError):
    """The message arrived while a turn ran and the stream's policy is `reject`."""


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
