"""What a stream does for a bridged thread (issues 29, 36, 44) beside answering: a
delete is a tombstone, an edit a revision of a user turn, a regenerate a new answer to
one, and a thread whose links say nobody answers is a relay, not a conversation.

The rule for an edit (docs/bridging.md): an edit of the thread's latest user message
branches at its parent and is answered again, like a chat app's edit. On a linked
thread (several people talking across platforms) an edit of an older message keeps the
conversation where it is: the revised turn takes the replaced one's place in the tree
(its sibling, `edit_of` naming it, the replaced turn's children moved under it), so the
model reads the new text, the tip stays and nothing is answered again. On an unlinked
thread an edit of an older message branches too (the later turns stay on the old
branch). An edit changes the text: the files the message carried stay with it.
"""

from __future__ import annotations

from dataclasses import dataclass

from ore_core.artifacts.attachment import Attachment
from ore_core.endpoint import GATEWAY_ANSWER_KEY
from ore_core.events import (
    DeleteEvent,
    EditEvent,
    ErrorEvent,
    EventContext,
    IngressEvent,
    OutputEvent,
    RegenerateEvent,
    TurnCompleteEvent,
    TurnDeletedEvent,
    UserMessageEvent,
)
from ore_core.ledger.thread import Thread
from ore_core.session.compaction import COPY_OF
from ore_core.turn import Role, TraversalControl, Turn, turn_text

__all__ = [
    "Revision",
    "delete_turn",
    "as_message",
    "edit_message",
    "find_message",
    "is_linked",
    "is_relay",
    "plan_edit",
    "plan_regenerate",
    "reanswers",
    "replaces_answer",
    "regenerate_message",
    "revise_in_place",
    "turn_extra",
    "unanswered",
]

EDIT_OF = "edit_of"


def is_relay(thread: Thread) -> bool:
    """The thread's links say nobody answers (`ore.gateway.answer` = `none`): a pure
    human relay, whose latest turn is a user turn when all went well."""
    return thread.meta().get(GATEWAY_ANSWER_KEY) == "none"


def is_linked(thread: Thread) -> bool:
    """The thread has links (the core mirrors their `answer` into its metadata)."""
    return thread.meta().get(GATEWAY_ANSWER_KEY) is not None


def unanswered(thread: Thread, event: UserMessageEvent) -> bool:
    """The message asks for no answer (`answer` false: an edit saved as it is), or the
    thread is a relay (`is_relay`): a message recorded is a message handled, and no
    processor (no model call) runs for it."""
    return not event.answer or is_relay(thread)


def turn_extra(event: UserMessageEvent) -> tuple[tuple[str, str], ...]:
    """What a user turn records beside its event id: the sender's display name
    (`sender`) and the message's `edit_of` / `reply_to` (issue 29)."""
    name = event.context.user_name
    if not name and not event.metadata:
        return ()
    extra = (("sender", name),) if name else ()
    return extra + tuple(event.metadata.items())


def find_message(thread: Thread, ref: str) -> Turn | None:
    """The turn `ref` names (its id, or the event id a message was sent with), at its
    latest revision: an edited message is edited, deleted or answered as it reads now."""
    turn = _named(thread, ref)
    if turn is None:
        return None
    revisions = {
        of: t for t in thread.all_turns() if (of := dict(t.extra).get(EDIT_OF)) is not None
    }
    seen = {turn.id}
    while (newer := revisions.get(turn.id)) is not None and newer.id not in seen:
        seen.add(newer.id)
        turn = newer
    return turn


def _named(thread: Thread, ref: str) -> Turn | None:
    """The turn `ref` names by id or event id. A compaction copies the turns it keeps
    (same event id, `copy_of` naming the original), so several may answer: the one on
    the active path wins, else the turn with that id, else the first with that event id."""
    on_path = {turn.id for turn in thread.turns()}
    named = [t for t in thread.all_turns() if ref in (t.id, t.event_id, dict(t.extra).get(COPY_OF))]
    current = next((t for t in named if t.id in on_path), None)
    if current is not None:
        return current
    return thread.get_turn(ref) or next((t for t in named if t.event_id == ref), None)


def _unknown(thread: Thread, ref: str, what: str, context: EventContext) -> ErrorEvent:
    return ErrorEvent(
        message=f"turn {ref} not found in thread {thread.id}: {what}",
        code="unknown_turn",
        context=context,
    )


def delete_turn(thread: Thread, event: DeleteEvent) -> OutputEvent:
    """A tombstone: the turn is skipped from now on (the ledger keeps it). Returns the
    `turn_deleted` event that tells every endpoint (again, for a redelivered delete),
    or the error for a turn the thread does not have."""
    turn = find_message(thread, event.turn_id)
    if turn is None:
        return _unknown(thread, event.turn_id, "nothing deleted", event.context)
    if turn.control != TraversalControl.SKIP:
        thread.set_control(turn.id, TraversalControl.SKIP)
    return TurnDeletedEvent(turn=turn.id, context=event.context)


@dataclass(frozen=True, slots=True)
class Revision:
    """What an edit does: `message` is the new text as a user message (its id the
    edit's, `edit_of` naming the replaced turn); `in_place` records it where the replaced
    turn is (no answer), otherwise it branches at the replaced turn's parent."""

    message: UserMessageEvent
    replaced: Turn
    in_place: bool
    redelivered: bool = False


def plan_edit(thread: Thread, event: EditEvent) -> Revision | ErrorEvent:
    """How `event` revises the thread (the rule in the module's docstring), or the
    error for a message the thread does not have. Changes nothing."""
    redelivered = thread.has_event(event.id)
    if redelivered:  # the revision is recorded: the replaced turn is the one it names
        revised = next(t for t in thread.all_turns() if t.event_id == event.id)
        replaced = thread.get_turn(dict(revised.extra).get(EDIT_OF, "")) or revised
    else:
        found = find_message(thread, event.turn_id)
        if found is None or found.role != Role.USER:
            return _unknown(thread, event.turn_id, "nothing edited", event.context)
        replaced = revised = found
    latest = next((t for t in reversed(thread.turns()) if t.role == Role.USER), None)
    in_place = latest is None or latest.id != revised.id
    in_place = in_place and (is_linked(thread) or redelivered)
    message = UserMessageEvent(
        id=event.id,
        content=event.content,
        images=event.images,
        attachments=tuple(a for a in replaced.artifacts if isinstance(a, Attachment)),
        metadata={EDIT_OF: replaced.id},
        answer=event.answer and not in_place,
        context=event.context,
    )
    return Revision(message, replaced, in_place, redelivered)


def reanswers(thread: Thread, event: EditEvent) -> bool:
    """Whether `event` is answered again (an edit of the latest user message, or of any
    on an unlinked thread): what the answer in flight is interrupted for."""
    planned = plan_edit(thread, event)
    return isinstance(planned, Revision) and not planned.in_place and planned.message.answer


def replaces_answer(thread: Thread, event: IngressEvent) -> bool:
    """A regenerate, or an edit answered again: the answer being written is replaced, so
    the stream stops it on arrival."""
    return isinstance(event, RegenerateEvent) or (
        isinstance(event, EditEvent) and reanswers(thread, event)
    )


def revise_in_place(thread: Thread, revision: Revision) -> Turn:
    """Record `revision` as the replaced turn's sibling and move the replaced turn's
    children under it: the active path reads the new text, the tip stays."""
    message, replaced = revision.message, revision.replaced
    tip = thread.current_tip
    thread.fork(replaced.parent_id)
    revised = thread.append(
        Role.USER, *message.artifacts(), event_id=message.id, extra=turn_extra(message)
    )
    for child in thread.all_turns():
        if child.parent_id == replaced.id:
            thread.set_parent(child.id, revised.id)
    thread.set_current_tip(revised.id if tip == replaced.id else tip)
    return revised


def plan_regenerate(thread: Thread, event: RegenerateEvent) -> Turn | ErrorEvent | None:
    """The user turn to answer again (`turn_id` names it or one of its answers); None
    when this regenerate is answered already (a redelivery); the error for a message the
    thread does not have. Changes nothing."""
    if thread.has_event(event.id):
        return None
    turn = find_message(thread, event.turn_id)
    seen: set[str] = set()
    while turn is not None and turn.role != Role.USER and turn.id not in seen:
        seen.add(turn.id)
        turn = thread.get_turn(turn.parent_id)
    if turn is None or turn.role != Role.USER:
        return _unknown(thread, event.turn_id, "nothing answered again", event.context)
    return turn


def edit_message(thread: Thread, event: EditEvent) -> UserMessageEvent | OutputEvent:
    """What a stream does with an edit: the user message to record and answer (a branch,
    forked here, or a redelivered edit), or the one event that says it all (the in-place
    revision's `turn_complete`, or the error)."""
    revision = plan_edit(thread, event)
    if isinstance(revision, ErrorEvent) or revision.redelivered:
        return revision if isinstance(revision, ErrorEvent) else revision.message
    if revision.in_place:
        return TurnCompleteEvent.of(revise_in_place(thread, revision), event.context)
    thread.fork(revision.replaced.parent_id)  # a branch beside the replaced message
    return revision.message


def regenerate_message(
    thread: Thread, event: RegenerateEvent
) -> UserMessageEvent | OutputEvent | None:
    """What a stream answers for a regenerate: the question again (the tip moved to its
    user turn here), the error for an unknown one, or None when answered already."""
    question = plan_regenerate(thread, event)
    if question is None or isinstance(question, ErrorEvent):
        return question
    thread.fork(question.id)
    return UserMessageEvent(
        id=question.event_id or event.id, content=turn_text(question), context=event.context
    )


def as_message(
    thread: Thread, event: EditEvent | RegenerateEvent
) -> tuple[UserMessageEvent | None, OutputEvent | None]:
    """(the user message a stream answers for `event`, the event it publishes first):
    see `edit_message` and `regenerate_message`."""
    found: UserMessageEvent | OutputEvent | None
    if isinstance(event, EditEvent):
        found = edit_message(thread, event)
    else:
        found = regenerate_message(thread, event)
    return (found, None) if isinstance(found, UserMessageEvent) else (None, found)
