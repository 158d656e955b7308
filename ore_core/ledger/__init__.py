"""The ledger: conversations as a branchable tree of turns with an append-only journal."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ore_core import _lazy_exports

if TYPE_CHECKING:
    from ore_core.ledger.buffer import Buffer
    from ore_core.ledger.clock import Clock, ClockFunc, FixedClock, SystemClock
    from ore_core.ledger.file_repository import FileRepository, FsyncPolicy
    from ore_core.ledger.journal import JournalState, JournalWriter, Repository
    from ore_core.ledger.meta import Meta, MetaListener
    from ore_core.ledger.repository import MemoryRepository
    from ore_core.ledger.thread import State, Thread
    from ore_core.ledger.views import Prepend, View, prepend, view
    from ore_core.turn import (
        Role,
        TraversalControl,
        Turn,
        format_timestamp,
        generate_turn_id,
        parse_timestamp,
        turn_from_dict,
        turn_to_dict,
    )

_EXPORTS: dict[str, str] = {
    "Buffer": "ore_core.ledger.buffer",
    "Clock": "ore_core.ledger.clock",
    "ClockFunc": "ore_core.ledger.clock",
    "FixedClock": "ore_core.ledger.clock",
    "SystemClock": "ore_core.ledger.clock",
    "FileRepository": "ore_core.ledger.file_repository",
    "FsyncPolicy": "ore_core.ledger.file_repository",
    "JournalState": "ore_core.ledger.journal",
    "JournalWriter": "ore_core.ledger.journal",
    "Repository": "ore_core.ledger.journal",
    "Meta": "ore_core.ledger.meta",
    "MetaListener": "ore_core.ledger.meta",
    "MemoryRepository": "ore_core.ledger.repository",
    "State": "ore_core.ledger.thread",
    "Thread": "ore_core.ledger.thread",
    "Prepend": "ore_core.ledger.views",
    "View": "ore_core.ledger.views",
    "prepend": "ore_core.ledger.views",
    "view": "ore_core.ledger.views",
    "Role": "ore_core.turn",
    "TraversalControl": "ore_core.turn",
    "Turn": "ore_core.turn",
    "format_timestamp": "ore_core.turn",
    "generate_turn_id": "ore_core.turn",
    "parse_timestamp": "ore_core.turn",
    "turn_from_dict": "ore_core.turn",
    "turn_to_dict": "ore_core.turn",
}
"""Public name -> the module that defines it, imported on first access."""

__all__ = [
    "Buffer",
    "Clock",
    "FileRepository",
    "FsyncPolicy",
    "MemoryRepository",
    "ClockFunc",
    "FixedClock",
    "JournalState",
    "JournalWriter",
    "Meta",
    "MetaListener",
    "Prepend",
    "Repository",
    "Role",
    "State",
    "SystemClock",
    "Thread",
    "TraversalControl",
    "Turn",
    "View",
    "format_timestamp",
    "generate_turn_id",
    "parse_timestamp",
    "prepend",
    "turn_from_dict",
    "turn_to_dict",
    "view",
]

__getattr__, __dir__ = _lazy_exports(__name__, _EXPORTS)
