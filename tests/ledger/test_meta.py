"""Meta: the live metadata handle of a State (docs/go-compatibility.md, "The thread tree")."""

from __future__ import annotations

import pytest

from ore_core import Thread
from ore_core.ledger.meta import Meta


def test_get_of_a_missing_key_is_none() -> None:
    assert Thread().meta().get("missing") is None


def test_set_then_get_returns_the_value() -> None:
    meta = Thread().meta()
    meta.set("ore.model.name", "gpt")
    assert meta.get("ore.model.name") == "gpt"


def test_set_replaces_the_prior_value() -> None:
    meta = Thread().meta()
    meta.set("k", "one")
    meta.set("k", "two")
    assert meta.all() == {"k": "two"}


def test_all_returns_every_key() -> None:
    meta = Thread().meta()
    meta.set("a", "1")
    meta.set("b", "2")
    assert meta.all() == {"a": "1", "b": "2"}


def test_all_is_a_copy() -> None:
    meta = Thread().meta()
    meta.set("k", "v")
    meta.all()["k"] = "changed"
    meta.all()["other"] = "x"
    assert meta.all() == {"k": "v"}


def test_handles_of_one_thread_share_storage() -> None:
    thread = Thread()
    first, second = thread.meta(), thread.meta()
    first.set("k", "v")
    assert second.get("k") == "v"


def test_threads_do_not_share_metadata() -> None:
    Thread().meta().set("k", "v")
    assert Thread().meta().all() == {}


def test_fresh_thread_meta_is_empty_and_writable() -> None:
    meta = Thread().meta()
    assert meta.all() == {}
    meta.set("k", "v")
    assert meta.all() == {"k": "v"}


def test_initial_metadata_is_copied_from_the_caller() -> None:
    initial = {"k": "v"}
    thread = Thread(metadata=initial)
    initial["k"] = "changed"
    assert thread.meta().get("k") == "v"


def test_delete_removes_the_key_and_reports_it_was_there() -> None:
    meta = Thread().meta()
    meta.set("k", "v")
    assert meta.delete("k") is True
    assert meta.get("k") is None


def test_delete_of_a_missing_key_reports_false() -> None:
    assert Thread().meta().delete("missing") is False


def test_listener_hears_each_change_with_none_for_a_delete() -> None:
    heard: list[tuple[str, str | None]] = []
    meta = Meta(listener=lambda key, value: heard.append((key, value)))
    meta.set("k", "v")
    meta.delete("k")
    meta.delete("k")
    assert heard == [("k", "v"), ("k", None)]


def test_failing_listener_leaves_the_metadata_unchanged() -> None:
    def refuse(key: str, value: str | None) -> None:
        raise OSError("disk full")

    data = {"k": "v"}
    meta = Meta(data, listener=refuse)
    with pytest.raises(OSError, match="disk full"):
        meta.set("k", "new")
    with pytest.raises(OSError, match="disk full"):
        meta.delete("k")
    assert meta.all() == {"k": "v"}


def test_meta_is_live_over_the_dict_it_was_given() -> None:
    data: dict[str, str] = {}
    Meta(data).set("k", "v")
    assert data == {"k": "v"}
