"""The ledger: conversations as a branchable tree of turns with an append-only journal."""

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
