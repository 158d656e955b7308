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
