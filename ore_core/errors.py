"""One exception hierarchy for everything ore raises on purpose.

Catch `OreError` to handle any of them; the subclasses say what went wrong and the
messages say what to do next (they name the thread id, the kind, the file).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pydantic import ValidationError

KeyPath = tuple[str, ...]
SECRET_MASK = "********"
"""What a secret value (password, token) reads as in messages and listings."""


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
    """The stored thread exists but cannot be read; the message names the cause.

    The message names the store's file too: it belongs in the core's log. A client (a
    conduit, the control API's caller) gets `public_message` instead."""

    @staticmethod
    def public_message(thread_id: str | None = None) -> str:
        """What a client is told: the same words for every store, no server path."""
        which = "the thread" if thread_id is None else f"thread {thread_id}"
        return (
            f"{which} is stored but cannot be read; an operator must repair or delete it "
            "(the core's log says where)"
        )


class ThreadExists(StoreError):
    """A thread with this id already exists; creating it again would overwrite it."""


class StaleThread(OreError):
    """A save from a copy of a thread that another writer changed since it was loaded.

    Stores compare the version a copy was loaded at with the stored one (compare and
    set) and refuse the save instead of overwriting or branching: the caller drops its
    copy and reloads (a bus worker does that by not acknowledging the message).
    """


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


def describe_validation_error(
    exc: ValidationError,
    *,
    whole: str = "(section)",
    key_prefix: str = "",
    show_input: bool = False,
    origin: Callable[[KeyPath], str] | None = None,
    known_keys: Callable[[KeyPath], Iterable[str]] | Iterable[str] | None = None,
    secret: Callable[[KeyPath, Any], bool] | None = None,
) -> str:
    """Every problem of a pydantic `ValidationError` on one line, `; `-separated.

    Each reads `key: what is allowed`, or `key = value: ...` with `show_input`
    (masked as `SECRET_MASK` where `secret(path, value)` says so), with `(origin)` after the
    key when `origin(path)` is given (e.g. `from ore.toml`). Given `known_keys` (a
    list, or a function of the key's path), an unknown key reads
    `unknown key KEY (known keys: ...)`. `key_prefix` is put before every key
    (`store.`); `whole` names the value itself when the error has no key.
    """
    parts = []
    for error in exc.errors():
        path = tuple(str(part) for part in error["loc"])
        key = key_prefix + ".".join(path) if path else whole
        notes = [origin(path)] if origin is not None else []
        if error["type"] == "extra_forbidden" and known_keys is not None:
            known = known_keys(path) if callable(known_keys) else known_keys
            notes.append(f"known keys: {', '.join(known) or 'none'}")
            parts.append(f"unknown key {key}" + (f" ({', '.join(notes)})" if notes else ""))
            continue
        if show_input:
            hidden = secret is not None and secret(path, error["input"])
            key += " = " + (SECRET_MASK if hidden else repr(error["input"]))
        if notes:
            key += f" ({', '.join(notes)})"
        parts.append(f"{key}: {validation_message(error['msg'])}")
    return "; ".join(parts)


def validation_message(message: str) -> str:
    """A pydantic error message without the `Value error, ` of a validator's ValueError."""
    return message.removeprefix("Value error, ")
