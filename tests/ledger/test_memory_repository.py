"""MemoryRepository: journals in memory (docs/go-compatibility.md, "The journal")."""

from __future__ import annotations

import threading
from datetime import UTC, datetime

from ore_core import Role, Text, Thread, TraversalControl, Turn
from ore_core.ledger.clock import FixedClock
from ore_core.ledger.journal import Repository
from ore_core.ledger.repository import MemoryRepository

T0 = datetime(2024, 1, 1, tzinfo=UTC)
STAMP = "2024-01-01T00:00:00Z"


def turn(turn_id: str, parent_id: str = "", control: str = "") -> Turn:
    role = Role.USER if turn_id.startswith("u") else Role.ASSISTANT
    return Turn(turn_id, role, [Text(turn_id)], parent_id=parent_id, timestamp=T0, control=control)


def test_memory_repository_meets_the_repository_protocol() -> None:
    repository: Repository = MemoryRepository()
    assert repository.thread_ids() == []


def test_thread_without_journal_hydrates_empty() -> None:
    state = MemoryRepository().hydrate("nope")
    assert (state.turns, state.tip, state.meta, state.problem) == ({}, "", {}, None)


def test_saved_turn_hydrates_without_moving_the_tip() -> None:
    repository = MemoryRepository()
    repository.save_turn("t", turn("u1"))
    state = repository.hydrate("t")
    assert state.turns == {"u1": turn("u1")}
    assert state.tip == ""


def test_update_tip_is_replayed() -> None:
    repository = MemoryRepository()
    repository.save_turn("t", turn("u1"))
    repository.update_tip("t", "u1")
    assert repository.hydrate("t").tip == "u1"


def test_update_control_is_replayed() -> None:
    repository = MemoryRepository()
    repository.save_turn("t", turn("u1"))
    repository.update_control("t", "u1", TraversalControl.SKIP)
    assert repository.hydrate("t").turns["u1"].control is TraversalControl.SKIP


def test_update_parent_to_empty_makes_a_root() -> None:
    repository = MemoryRepository()
    repository.save_turn("t", turn("a1", parent_id="u1"))
    repository.update_parent("t", "a1", "")
    assert repository.hydrate("t").turns["a1"].parent_id == ""


def test_full_conversation_with_a_summary_walks_from_the_summary() -> None:
    repository = MemoryRepository()
    parent = ""
    for turn_id in ["u1", "a1", "u2", "summary", "u3", "a3"]:
        repository.save_turn("t", turn(turn_id, parent_id=parent))
        parent = turn_id
    repository.update_tip("t", "u2")
    repository.update_control("t", "summary", "stop")
    repository.update_tip("t", "a3")
    thread = Thread.from_journal(repository, "t", bind=False)
    assert (thread.current_tip, len(thread)) == ("a3", 6)
    assert [t.id for t in thread.turns()] == ["summary", "u3", "a3"]


def test_malformed_payload_keeps_the_good_entry_and_skips_the_rest() -> None:
    repository = MemoryRepository()
    repository.save_turn("t", turn("u1"))
    repository.append("t", [{"tx_type": "update_tip", "timestamp": STAMP, "payload": [1, 2]}])
    repository.update_tip("t", "u1")
    state = repository.hydrate("t")
    assert list(state.turns) == ["u1"]
    assert state.tip == ""
    assert state.problem is not None


def test_unknown_tx_type_stops_replay_without_an_error() -> None:
    repository = MemoryRepository()
    repository.save_turn("t", turn("u1"))
    repository.append("t", [{"tx_type": "bogus", "timestamp": STAMP, "payload": {}}])
    repository.update_tip("t", "u1")
    state = repository.hydrate("t")
    assert (list(state.turns), state.tip) == (["u1"], "")
    assert state.problem is not None
    assert "bogus" in state.problem


def test_journal_returns_a_copy() -> None:
    repository = MemoryRepository()
    repository.update_tip("t", "u1")
    repository.journal("t")[0]["payload"]["current_tip"] = "changed"
    repository.journal("t").clear()
    assert repository.journal("t")[0]["payload"]["current_tip"] == "u1"


def test_journal_holds_entries_in_append_order() -> None:
    repository = MemoryRepository(clock=FixedClock(T0))
    repository.save_turn("t", turn("u1"))
    repository.update_tip("t", "u1")
    assert [e["tx_type"] for e in repository.journal("t")] == ["add_turn", "update_tip"]
    assert repository.journal("t")[1]["payload"] == {"timestamp": STAMP, "current_tip": "u1"}


def test_artifacts_come_back_as_equal_values() -> None:
    repository = MemoryRepository()
    original = turn("u1")
    repository.save_turn("t", original)
    restored = repository.hydrate("t").turns["u1"]
    assert restored.artifacts == original.artifacts
    assert restored.artifacts[0] is not original.artifacts[0]


def test_updates_of_unknown_turns_are_no_ops() -> None:
    repository = MemoryRepository()
    repository.update_control("t", "ghost", "stop")
    repository.update_parent("t", "ghost", "x")
    state = repository.hydrate("t")
    assert (state.turns, state.problem) == ({}, None)


def test_writer_is_the_same_object_for_a_thread() -> None:
    repository = MemoryRepository()
    assert repository.writer("t") is repository.writer("t")
    assert repository.writer("t") is not repository.writer("other")


def test_threads_are_kept_apart() -> None:
    repository = MemoryRepository()
    repository.save_turn("a", turn("u1"))
    repository.save_turn("b", turn("u2"))
    assert list(repository.hydrate("a").turns) == ["u1"]
    assert list(repository.hydrate("b").turns) == ["u2"]


def test_thread_ids_lists_threads_with_entries_sorted() -> None:
    repository = MemoryRepository()
    repository.update_tip("b", "x")
    repository.update_tip("a", "x")
    assert repository.thread_ids() == ["a", "b"]


def test_exists_is_true_once_a_thread_has_an_entry() -> None:
    repository = MemoryRepository()
    assert not repository.exists("t")
    repository.update_tip("t", "x")
    assert repository.exists("t")


def test_delete_forgets_the_thread_and_reports_whether_it_existed() -> None:
    repository = MemoryRepository()
    repository.update_tip("t", "x")
    assert repository.delete("t") is True
    assert repository.delete("t") is False
    assert (repository.exists("t"), repository.hydrate("t").tip) == (False, "")


def test_bound_thread_persists_metadata_changes() -> None:
    repository = MemoryRepository()
    thread = Thread.from_journal(repository, "t")
    thread.meta().set("title", "hello")
    thread.meta().set("model", "m")
    thread.meta().delete("title")
    assert repository.hydrate("t").meta == {"model": "m"}


def test_concurrent_writers_from_os_threads_lose_no_entry() -> None:
    repository = MemoryRepository()
    start = threading.Barrier(4)

    def write(name: str) -> None:
        start.wait()
        for i in range(200):
            repository.writer("shared").update_tip(f"{name}-{i}")
            repository.writer(name).update_tip(str(i))

    workers = [threading.Thread(target=write, args=(f"w{n}",)) for n in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert len(repository.journal("shared")) == 800
    assert all(repository.hydrate(f"w{n}").tip == "199" for n in range(4))


def test_close_and_flush_keep_entries_readable() -> None:
    repository = MemoryRepository()
    repository.update_tip("t", "x")
    repository.flush()
    repository.close()
    repository.close()
    assert repository.hydrate("t").tip == "x"
