"""Marks on a turn that start no model turn: a delete's tombstone (`delete_turn`) and
reactions (issue 39), who reacts to a turn with what, kept on the turn itself.

A turn's reactions are its `reactions` metadata, a JSON object from each emoji to the
people reacting with it (`namespace:user`, in the order they came): the thread's own
state, journaled like any change of a turn and shown wherever a turn is (`ore threads
show`, the thread API). One person's one emoji counts once, so a reaction told twice
(a redelivery, a platform's echo) or the removal of one never made changes nothing.
Reactions are never the model's business: nothing here runs a processor.
"""

from __future__ import annotations

from dataclasses import replace

from ore_core import jsonutil
from ore_core.events import (
    DeleteEvent,
    ErrorEvent,
    EventContext,
    OutputEvent,
    ReactEvent,
    ReactionEvent,
)
from ore_core.ledger.thread import Thread
from ore_core.session.bridging import delete_turn, find_message
from ore_core.turn import Role, Turn, turn_text

__all__ = [
    "EXCERPT_LENGTH",
    "REACTIONS",
    "mark_turn",
    "react_to",
    "reactions_of",
    "reactor",
]

REACTIONS = "reactions"
"""The `Turn.extra` key of a turn's reactions."""

EXCERPT_LENGTH = 60
"""Characters of the turn's text a `reaction` event quotes."""

Reactions = dict[str, list[str]]


def reactor(context: EventContext) -> str:
    """Who reacts: `namespace:user` (the namespace alone for a sender without a user)."""
    return f"{context.provenance}:{context.user}" if context.user else context.provenance


def reactions_of(turn: Turn) -> Reactions:
    """The turn's reactions: each emoji and the people reacting with it."""
    stored = dict(turn.extra).get(REACTIONS)
    if not stored:
        return {}
    value = jsonutil.loads(stored)
    return {str(emoji): [str(who) for who in people] for emoji, people in value.items()}


def mark_turn(thread: Thread, event: DeleteEvent | ReactEvent) -> OutputEvent | None:
    """What a stream does with a delete or a reaction: the event that tells every endpoint
    (the error for an unknown turn; None when a reaction changed nothing)."""
    if isinstance(event, DeleteEvent):
        return delete_turn(thread, event)
    return react_to(thread, event)


def react_to(thread: Thread, event: ReactEvent) -> ReactionEvent | ErrorEvent | None:
    """Apply `event` to the turn it names: the `reaction` event that tells every endpoint,
    None when nothing changed (counted once already), or the error for a turn the thread
    does not have."""
    turn = find_message(thread, event.turn_id)
    if turn is None:
        return ErrorEvent(
            message=f"turn {event.turn_id} not found in thread {thread.id}: no reaction recorded",
            code="unknown_turn",
            context=event.context,
        )
    reactions = reactions_of(turn)
    who = reactor(event.context)
    people = reactions.get(event.emoji, [])
    if (who in people) != event.remove:
        return None  # added before, or never there to take back
    people = [p for p in people if p != who] if event.remove else [*people, who]
    if people:
        reactions[event.emoji] = people
    else:
        reactions.pop(event.emoji, None)
    thread.save_turn(replace(turn, extra=_with_reactions(turn.extra, reactions)))
    return ReactionEvent(
        turn=turn.id,
        message=turn.event_id if turn.role == Role.USER else "",
        emoji=event.emoji,
        remove=event.remove,
        reactors=tuple(people),
        excerpt=_excerpt(turn),
        context=event.context,
    )


def _with_reactions(
    extra: tuple[tuple[str, str], ...], reactions: Reactions
) -> tuple[tuple[str, str], ...]:
    kept = tuple(pair for pair in extra if pair[0] != REACTIONS)
    if not reactions:
        return kept
    return (*kept, (REACTIONS, jsonutil.dumps(reactions).decode()))


def _excerpt(turn: Turn) -> str:
    text = " ".join(turn_text(turn).split())
    return text if len(text) <= EXCERPT_LENGTH else text[: EXCERPT_LENGTH - 1] + "…"
