"""What a stream does for a bridged thread (issue 29) beside answering: a delete is a
tombstone, and a thread whose links say nobody answers is a relay, not a conversation."""

from __future__ import annotations

from ore_core.endpoint import GATEWAY_ANSWER_KEY
from ore_core.events import (
    DeleteEvent,
    ErrorEvent,
    OutputEvent,
    TurnDeletedEvent,
    UserMessageEvent,
)
from ore_core.ledger.thread import Thread
from ore_core.turn import TraversalControl

__all__ = ["delete_turn", "is_relay", "unanswered"]


def is_relay(thread: Thread) -> bool:
    """The thread's links say nobody answers (`ore.gateway.answer` = `none`): a pure
    human relay, whose latest turn is a user turn when all went well."""
    return thread.meta().get(GATEWAY_ANSWER_KEY) == "none"


def unanswered(thread: Thread, event: UserMessageEvent) -> bool:
    """The message asks for no answer (`answer` false: an edit saved as it is), or the
    thread is a relay (`is_relay`): a message recorded is a message handled, and no
    processor (no model call) runs for it."""
    return not event.answer or is_relay(thread)


def delete_turn(thread: Thread, event: DeleteEvent) -> OutputEvent:
    """A tombstone: the turn is skipped from now on (the ledger keeps it). Returns the
    `turn_deleted` event that tells every endpoint (again, for a redelivered delete),
    or the error for a turn the thread does not have."""
    turn = thread.get_turn(event.turn_id)
    if turn is None:
        return ErrorEvent(
            message=f"turn {event.turn_id} not found in thread {thread.id}: nothing deleted",
            code="unknown_turn",
            context=event.context,
        )
    if turn.control != TraversalControl.SKIP:
        thread.set_control(turn.id, TraversalControl.SKIP)
    return TurnDeletedEvent(turn=turn.id, context=event.context)
