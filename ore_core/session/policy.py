"""DoubleTexting: what a thread does with a message that arrives while a turn runs.

A setting of its own (`[session] double_texting` in the config) that the Stream
obeys; kept apart from the Stream so the settings can name it without importing it.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["DoubleTexting"]


class DoubleTexting(StrEnum):
    """What to do with a user message that arrives while a turn is running."""

    QUEUE = "queue"  # handle it after the running turn (the seed's behaviour)
    INTERRUPT = "interrupt"  # cancel the running turn, then handle the new message
    COLLECT = "collect"  # merge every message queued meanwhile into one user turn
    REJECT = "reject"  # refuse it with a notice to the sender
