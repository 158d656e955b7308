"""What a stream does with a message it has seen before (a bus redelivered it): an
answered one is never answered twice, but its recorded events may be announced again."""

from __future__ import annotations

from collections.abc import Iterable

import structlog

from ore_core.events import OutputEvent, UserMessageEvent
from ore_core.ledger.thread import Thread
from ore_core.session.turn_context import recorded_events
from ore_core.turn import Role, Turn

__all__ = ["Redeliveries"]

log = structlog.get_logger("ore.session")


class Redeliveries:
    """The answered messages of one stream whose recorded events are to be announced again."""

    __slots__ = ("_announce_again",)

    def __init__(self) -> None:
        self._announce_again: set[str] = set()

    def announce_again(self, event_ids: Iterable[str]) -> None:
        """Announce the recorded turns of `event_ids` again when they come again."""
        self._announce_again.update(event_ids)

    def replay(
        self, thread: Thread, event: UserMessageEvent, *, handled: bool = False
    ) -> list[OutputEvent] | None:
        """The events to publish again for `event` when it is answered already (often
        none: only its `done` follows); None when it is not answered yet. `handled`:
        recording the message was all it needed (a relay nobody answers)."""
        turns = thread.all_turns()
        mine = {t.id for t in turns if t.event_id == event.id}
        if not handled and not any(t.parent_id in mine and t.role != Role.USER for t in turns):
            return None
        if event.id not in self._announce_again:
            log.debug("redelivered message already answered", thread_id=thread.id)
            return []
        self._announce_again.discard(event.id)
        return recorded_events(_message_turns(thread, event.id), event.context)

    def recorded_tip(self, thread: Thread, event: UserMessageEvent) -> Turn | None:
        """The recorded user turn of unanswered `event` when it is the tip (to announce
        again: same turn id, so a receiver that saw it can tell); None when newer turns
        follow it: it is recorded again at the tip and answered there, late rather than
        never."""
        tip = thread.get_turn(thread.current_tip)
        if tip is not None and tip.event_id == event.id:
            return tip
        log.warning(
            "unanswered message redelivered after newer ones; answering it now",
            thread_id=thread.id,
            event_id=event.id,
        )
        return None


def _message_turns(thread: Thread, event_id: str) -> list[Turn]:
    """The user turn of message `event_id` on the active path and the turns after it up
    to the next user turn (its answer)."""
    path = thread.turns()
    starts = [i for i, t in enumerate(path) if t.role == Role.USER and t.event_id == event_id]
    if not starts:
        return []
    turns = [path[starts[-1]]]
    for turn in path[starts[-1] + 1 :]:
        if turn.role == Role.USER:
            break
        turns.append(turn)
    return turns
