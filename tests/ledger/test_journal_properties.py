"""Properties of journaling a Thread: replay rebuilds it, and any torn file is a past state.

Random sequences of the mutations a bound Thread journals (append, fork, set_control,
set_parent, set_current_tip, undo, metadata set and delete) are applied to a thread
bound to a repository; the state after every operation is recorded.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ore_core import Role, Text, Thread, TraversalControl, Turn
from ore_core.ledger.clock import FixedClock
from ore_core.ledger.file_repository import FileRepository
from ore_core.ledger.journal import Repository
from ore_core.ledger.repository import MemoryRepository

T0 = datetime(2024, 1, 1, tzinfo=UTC)
THREAD = "t"

Snapshot = tuple[str, dict[str, Turn], dict[str, str]]

INDEX = st.integers(0, 40)  # picks a turn appended so far (modulo their number)
KEYS = st.sampled_from(["title", "model", "ore.model.name"])
OPERATIONS = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.sampled_from(list(Role)), st.text(max_size=30)),
        st.tuples(st.just("fork"), INDEX),
        st.tuples(st.just("set_control"), INDEX, st.sampled_from(list(TraversalControl))),
        st.tuples(st.just("set_parent"), INDEX, st.one_of(INDEX, st.sampled_from(["", "gone"]))),
        st.tuples(st.just("set_current_tip"), st.one_of(INDEX, st.sampled_from(["", "gone"]))),
        st.tuples(st.just("undo")),
        st.tuples(st.just("meta_set"), KEYS, st.text(max_size=10)),
        st.tuples(st.just("meta_delete"), KEYS),
    ),
    max_size=25,
)


def apply(thread: Thread, appended: list[str], operation: tuple[Any, ...]) -> None:
    """Apply one random operation; turn indexes pick from the turns appended so far."""

    def pick(choice: int | str) -> str | None:
        if isinstance(choice, str):
            return choice
        return appended[choice % len(appended)] if appended else None

    name, *args = operation
    if name == "append":
        appended.append(thread.append(args[0], Text(args[1])).id)
    elif name == "undo":
        thread.undo()
    elif name == "meta_set":
        thread.meta().set(args[0], args[1])
    elif name == "meta_delete":
        thread.meta().delete(args[0])
    elif name == "set_current_tip":
        tip = pick(args[0])
        if tip is not None:
            thread.set_current_tip(tip)
    else:
        turn_id = pick(args[0])
        if turn_id is None:
            return
        if name == "fork":
            thread.fork(turn_id)
        elif name == "set_control":
            thread.set_control(turn_id, args[1])
        else:
            parent = pick(args[1])
            thread.set_parent(turn_id, "" if parent is None else parent)


def snapshot(thread: Thread) -> Snapshot:
    return thread.current_tip, {t.id: t for t in thread.all_turns()}, thread.meta().all()


def clock() -> FixedClock:
    return FixedClock(T0, step=timedelta(microseconds=1))


def run(repository: Repository, operations: list[tuple[Any, ...]]) -> list[Snapshot]:
    """Apply `operations` to a thread bound to `repository`; the state before and after each."""
    thread = Thread.from_journal(repository, THREAD, clock=clock())
    appended: list[str] = []
    states = [snapshot(thread)]
    for operation in operations:
        apply(thread, appended, operation)
        states.append(snapshot(thread))
    return states


@contextmanager
def repository_of(kind: str) -> Iterator[Repository]:
    if kind == "memory":
        yield MemoryRepository()
        return
    with tempfile.TemporaryDirectory() as directory, FileRepository(directory) as repository:
        yield repository


@pytest.mark.parametrize("kind", ["memory", "file"])
@settings(max_examples=75, deadline=None)
@given(operations=OPERATIONS)
def test_hydrating_the_journal_rebuilds_the_thread(
    kind: str, operations: list[tuple[Any, ...]]
) -> None:
    with repository_of(kind) as repository:
        live = Thread.from_journal(repository, THREAD, clock=clock())
        appended: list[str] = []
        for operation in operations:
            apply(live, appended, operation)
        rebuilt = Thread.from_journal(repository, THREAD, bind=False)
        assert rebuilt.turns() == live.turns()
        assert snapshot(rebuilt) == snapshot(live)
        assert repository.hydrate(THREAD).problem is None


def cut_points(raw: bytes, data: st.DataObject) -> set[int]:
    """Every line end and its neighbours, both file ends, and a few random offsets."""
    ends = [i + 1 for i, byte in enumerate(raw) if byte == ord("\n")]
    points = {0, len(raw)} | {p + d for p in ends for d in (-1, 0, 1)}
    fractions = data.draw(st.lists(st.floats(0, 1), max_size=8))
    points |= {int(fraction * len(raw)) for fraction in fractions}
    return {p for p in points if 0 <= p <= len(raw)}


@settings(max_examples=60, deadline=None)
@given(operations=OPERATIONS, data=st.data())
def test_a_journal_cut_at_any_byte_is_the_state_after_some_prefix(
    operations: list[tuple[Any, ...]], data: st.DataObject
) -> None:
    with tempfile.TemporaryDirectory() as directory:
        with FileRepository(Path(directory, "live"), clock=clock()) as repository:
            states = run(repository, operations)
            path = repository.path(THREAD)
        raw = path.read_bytes() if path.exists() else b""
        cut = Path(directory, "cut", path.name)
        with FileRepository(cut.parent) as reader:
            for offset in sorted(cut_points(raw, data)):
                cut.write_bytes(raw[:offset])
                rebuilt = snapshot(Thread.from_journal(reader, THREAD, bind=False))
                assert rebuilt in states, f"cut at byte {offset} of {len(raw)}"
                if offset == len(raw):
                    assert rebuilt == states[-1]
