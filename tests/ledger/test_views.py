"""View and Prepend: projections that never touch the stored turns (docs/go-compatibility.md)."""

from __future__ import annotations

from ore_core import Role, Text, Thread, Turn
from ore_core.ledger.thread import State
from ore_core.ledger.views import Prepend, View, prepend, view


def ids(turns: list[Turn]) -> list[str]:
    return [turn.id for turn in turns]


def thread_with(*contents: str) -> Thread:
    thread = Thread("thread-1")
    for content in contents:
        thread.append(Role.USER, Text(content))
    return thread


def texts_of(turn: Turn) -> list[str]:
    return [artifact.content for artifact in turn.artifacts if isinstance(artifact, Text)]


def texts(state: State) -> list[str]:
    return [text for turn in state.turns() for text in texts_of(turn)]


SYSTEM = Turn("sys", Role.SYSTEM, [Text("be brief")])
RULE = Turn("rule", Role.USER, [Text("no swearing")])


# -- prepend -----------------------------------------------------------------------------------


def test_prepend_puts_the_virtual_turn_first() -> None:
    assert texts(prepend(thread_with("hi"), [SYSTEM])) == ["be brief", "hi"]


def test_prepend_keeps_many_virtual_turns_in_order() -> None:
    assert texts(prepend(thread_with("hi"), [SYSTEM, RULE])) == ["be brief", "no swearing", "hi"]


def test_prepend_with_no_virtual_turns_returns_the_base_itself() -> None:
    base = thread_with("hi")
    assert prepend(base, []) is base
    assert prepend(base, None) is base


def test_prepend_keeps_its_own_list_independent_of_the_input_and_callers() -> None:
    virtual = [Turn("sys", Role.SYSTEM, (Text("be brief"),))]
    state = prepend(thread_with("hi"), virtual)
    virtual.clear()
    state.turns().clear()
    assert texts(state) == ["be brief", "hi"]


def test_append_through_prepend_lands_in_the_base_and_shows_after_it() -> None:
    base = thread_with("hi")
    state = prepend(base, [SYSTEM])
    state.append(Role.ASSISTANT, Text("hello"))
    assert texts(base) == ["hi", "hello"]
    assert texts(state) == ["be brief", "hi", "hello"]


def test_prepend_over_an_empty_base_shows_only_the_virtual_turns() -> None:
    assert ids(prepend(Thread(), [SYSTEM]).turns()) == ["sys"]


def test_prepend_reads_the_base_on_every_call() -> None:
    base = thread_with("hi")
    state = prepend(base, [SYSTEM])
    base.append(Role.ASSISTANT, Text("later"))
    assert texts(state) == ["be brief", "hi", "later"]


def test_prepend_exposes_its_base_and_virtual_turns() -> None:
    base = thread_with("hi")
    state = Prepend(base, [SYSTEM])
    assert state.base_state() is base
    assert state.virtual_turns() == [SYSTEM]


def test_prepend_meta_is_the_base_meta() -> None:
    base = thread_with("hi")
    prepend(base, [SYSTEM]).meta().set("k", "v")
    assert base.meta().get("k") == "v"


def test_prepend_over_a_view_composes() -> None:
    base = thread_with("one", "two")
    state = prepend(view(base, base.turns()[1:]), [SYSTEM])
    assert texts(state) == ["be brief", "two"]


# -- view --------------------------------------------------------------------------------------


def test_view_returns_a_new_list_of_the_projected_turns() -> None:
    state = view(thread_with("hi"), [SYSTEM])
    state.turns().clear()
    assert state.turns() == [SYSTEM]


def test_view_keeps_its_own_list_of_the_given_turns() -> None:
    given = [Turn("sys", Role.SYSTEM, (Text("be brief"),))]
    state = view(thread_with("hi"), given)
    given.clear()
    assert state.turns() == [SYSTEM]


def test_view_append_goes_to_the_base_and_leaves_the_view_unchanged() -> None:
    base = thread_with("hi")
    state = view(base, [SYSTEM])
    state.append(Role.ASSISTANT, Text("hello"), event_id="ev-1")
    assert texts(base) == ["hi", "hello"]
    assert base.has_event("ev-1")
    assert state.turns() == [SYSTEM]


def test_view_with_no_turns_returns_the_base_itself() -> None:
    base = thread_with("hi")
    assert view(base, []) is base
    assert view(base, None) is base


def test_view_can_filter_the_base_turns() -> None:
    base = thread_with("keep", "drop", "keep too")
    state = view(base, [turn for turn in base.turns() if "drop" not in texts_of(turn)])
    assert texts(state) == ["keep", "keep too"]


def test_view_meta_is_the_base_meta() -> None:
    base = thread_with("hi")
    view(base, [SYSTEM]).meta().set("k", "v")
    assert base.meta().get("k") == "v"


def test_view_exposes_its_base() -> None:
    base = thread_with("hi")
    assert View(base, [SYSTEM]).base_state() is base


def test_projections_satisfy_state() -> None:
    base = thread_with("hi")
    assert isinstance(View(base, [SYSTEM]), State)
    assert isinstance(Prepend(base, [SYSTEM]), State)
