"""LastThread: the thread an interactive chat used last, kept in one file."""

from __future__ import annotations

from pathlib import Path

from ore_conduit_stdin.state import LastThread


def test_a_saved_thread_is_loaded_again(tmp_path: Path) -> None:
    LastThread(tmp_path / "stdin").save("t-1")
    assert LastThread(tmp_path / "stdin").load() == "t-1"


def test_nothing_saved_loads_as_none(tmp_path: Path) -> None:
    assert LastThread(tmp_path).load() is None


def test_an_invalid_thread_id_in_the_file_loads_as_none(tmp_path: Path) -> None:
    (tmp_path / "last-thread").write_text("not a thread id\n")
    assert LastThread(tmp_path).load() is None


def test_saving_leaves_no_temporary_file_behind(tmp_path: Path) -> None:
    LastThread(tmp_path).save("t-1")
    LastThread(tmp_path).save("t-2")
    assert [path.name for path in tmp_path.iterdir()] == ["last-thread"]
