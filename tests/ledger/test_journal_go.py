"""Journal files as the Go framework reads them (issue 28, item 13).

The Go reader (docs/go-compatibility.md, "The journal") replays `add_turn`,
`update_tip`, `update_control` and `update_parent`, applies an update of an unknown
turn as nothing, and stops at the first entry of any other `tx_type`. `go_replay`
below follows those rules; metadata changes used to be `update_meta` entries, where a
Go reader stopped and lost every turn written after them.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from ore_core import Role, Text
from ore_core.ledger.file_repository import journal_file_name
from ore_core.session.stores import JournalStore
from tests.paths import DOCS

GO_TX_TYPES = {"add_turn", "update_tip", "update_control", "update_parent"}


def go_replay(path: Path) -> tuple[dict[str, dict[str, Any]], str]:
    """(turns by id, tip) as the Go framework's FileRepository hydrates `path`."""
    turns: dict[str, dict[str, Any]] = {}
    tip = ""
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        entry = json.loads(line)
        kind, payload = entry["tx_type"], entry["payload"]
        if kind not in GO_TX_TYPES:
            break  # unknown tx_type: replay stops, no error
        if kind == "add_turn":
            turns[payload["turn"]["id"]] = payload["turn"]
        elif kind == "update_tip":
            tip = payload["current_tip"]
        elif payload["turn_id"] in turns:  # update_control / update_parent
            field = "control" if kind == "update_control" else "parent_id"
            turns[payload["turn_id"]][field] = payload[field]
    return turns, tip


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[JournalStore]:
    store = JournalStore(tmp_path, fsync="never")
    yield store
    await store.close()


async def test_a_go_reader_sees_every_turn_of_a_thread_with_metadata(
    store: JournalStore, tmp_path: Path
) -> None:
    thread = await store.create(None, {"ore.namespace": "slack", "title": "demo"})
    thread.append(Role.USER, Text("one"))
    await store.save(thread)
    thread.meta().set("title", "renamed")
    thread.meta().delete("ore.namespace")
    thread.append(Role.ASSISTANT, Text("two"))
    await store.save(thread)
    turns, tip = go_replay(tmp_path / journal_file_name(thread.id))
    assert sorted(turns) == sorted(turn.id for turn in thread.all_turns())
    assert tip == thread.current_tip
    assert all(turn.get("control", "") == "" for turn in turns.values())


async def test_ore_reads_the_metadata_back(store: JournalStore, tmp_path: Path) -> None:
    thread = await store.create(None, {"ore.namespace": "slack", "title": "demo"})
    thread.meta().set("title", "renamed")
    thread.meta().delete("ore.namespace")
    await store.save(thread)
    reopened = JournalStore(tmp_path, fsync="never")
    try:
        assert (await reopened.get(thread.id)).meta().all() == {"title": "renamed"}
    finally:
        await reopened.close()


async def test_a_journal_of_an_older_ore_with_update_meta_still_reads(
    store: JournalStore, tmp_path: Path
) -> None:
    stamp = "2026-01-01T00:00:00Z"
    lines = [
        {"tx_type": "update_meta", "timestamp": stamp, "payload": {"key": "k", "value": "v"}},
        {"tx_type": "update_meta", "timestamp": stamp, "payload": {"key": "gone", "value": "x"}},
        {"tx_type": "update_meta", "timestamp": stamp, "payload": {"key": "gone", "deleted": True}},
    ]
    (tmp_path / "old-thread.jsonl").write_text(
        "".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8"
    )
    assert (await store.get("old-thread")).meta().all() == {"k": "v"}


def test_thread_ids_name_their_files_as_go_does() -> None:
    """Every thread id is `[A-Za-z0-9_-]{1,128}`: Go's sanitising leaves such ids alone."""
    assert journal_file_name("a1_B-2") == "a1_B-2.jsonl"


def test_docs_say_what_a_go_reader_sees_of_ores_journals() -> None:
    page = (DOCS / "stores.md").read_text(encoding="utf-8")
    text = " ".join(page.split())
    assert "## Journal files and the Go framework" in page
    assert "Go's empty id (`default.jsonl`) is read by ore as the thread `default`" in text
    assert "only the metadata is lost to it" in text
