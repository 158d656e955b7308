"""The ledger: conversations as a branchable tree of turns with an append-only journal."""

from ore_core.ledger.turn import (
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
    "Role",
    "TraversalControl",
    "Turn",
    "format_timestamp",
    "generate_turn_id",
    "parse_timestamp",
    "turn_from_dict",
    "turn_to_dict",
]
