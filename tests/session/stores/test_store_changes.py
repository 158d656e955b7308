"""ChangeSet: the net effect of a thread's recorded changes, as a snapshot store writes it."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ore_core import Role, Text, Thread, Turn
from ore_core.session.stores.changes import ChangeSet, ChangeTracker


def _reread_all(net: ChangeSet, thread: Thread) -> list[Turn]:
    """What `changed_turns` always returned: every None entry re-read from the thread."""
    turns = (
        thread.get_turn(turn_id) if turn is None else turn for turn_id, turn in net.turns.items()
    )
    return [turn for turn in turns if turn is not None]


def _tracked() -> tuple[Thread, ChangeTracker]:
    tracker = ChangeTracker()
    return tracker.track(Thread("t-changes")), tracker


def _net(thread: Thread, tracker: ChangeTracker) -> ChangeSet:
    recorder = tracker.recorder(thread)
    assert recorder is not None
    return ChangeSet.of(recorder.take())


def test_added_turns_are_the_recorded_ones_in_order() -> None:
    thread, tracker = _tracked()
    first = thread.append(Role.USER, Text("one"))
    second = thread.append(Role.ASSISTANT, Text("two"))
    net = _net(thread, tracker)
    assert not net.reread
    assert net.changed_turns(thread) == [first, second]
    assert net.tip == second.id


def test_a_later_control_change_reads_the_threads_copy() -> None:
    thread, tracker = _tracked()
    turn = thread.append(Role.USER, Text("one"))
    thread.set_control(turn.id, "stop")
    net = _net(thread, tracker)
    assert net.reread
    assert net.changed_turns(thread) == [thread.get_turn(turn.id)]
    assert net.changed_turns(thread)[0].control == "stop"


_OPS = st.lists(
    st.tuples(st.sampled_from(["append", "save", "control", "parent", "meta"]), st.integers(0, 5)),
    max_size=25,
)


@given(_OPS)
def test_changed_turns_is_what_rereading_every_touched_turn_gives(
    ops: list[tuple[str, int]],
) -> None:
    thread, tracker = _tracked()
    ids: list[str] = []
    for op, n in ops:
        if op == "append" or not ids:
            ids.append(thread.append(Role.USER, Text(f"t{n}")).id)
        elif op == "save":
            thread.save_turn(Turn(ids[n % len(ids)], Role.USER, [Text(f"edited {n}")]))
        elif op == "control":
            thread.set_control(ids[n % len(ids)], "stop" if n % 2 else "continue")
        elif op == "parent":
            thread.set_parent(ids[n % len(ids)], ids[(n + 1) % len(ids)])
        else:
            thread.meta().set(f"k{n}", str(n))
    net = _net(thread, tracker)
    assert net.changed_turns(thread) == _reread_all(net, thread)
    # With or without a re-read: each touched turn as the thread holds it now.
    assert net.changed_turns(thread) == [thread.get_turn(turn_id) for turn_id in dict.fromkeys(ids)]
