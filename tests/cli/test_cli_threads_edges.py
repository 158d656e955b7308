"""`ore threads` rough edges (issue 28, item 13): usage and stop reasons are not shown as
placeholder lines, show and export take both JSON spellings, turn ids take prefixes."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from ore_core import Role, StopReason, Text, Usage
from ore_core.ledger.thread import Thread
from ore_core.session.stores import SQLiteStore
from ore_core.turn import Turn
from tests.cli.conftest import ore


@pytest.fixture(autouse=True)
def _store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORE_LOAD_PLUGINS", "")
    monkeypatch.setenv("ORE_STORE__NAME", "sqlite")
    monkeypatch.setenv("ORE_STORE__PATH", str(tmp_path / "threads.db"))


@pytest.fixture
def answered(tmp_path: Path) -> Thread:
    """Thread `t1`: a question, and an answer that carries its usage and stop reason."""

    async def write() -> Thread:
        store = SQLiteStore(tmp_path / "threads.db")
        try:
            thread = await store.create("t1")
            thread.append(Role.USER, Text("what is ore?"))
            thread.append(
                Role.ASSISTANT,
                Text("a framework"),
                Usage(prompt_tokens=5, completion_tokens=2, total_tokens=7),
                StopReason("stop"),
            )
            await store.save(thread)
            return await store.get("t1")
        finally:
            await store.close()

    return asyncio.run(write())


@pytest.mark.parametrize(
    "command", [("threads", "show", "t1"), ("threads", "export", "t1"), ("threads", "list")]
)
def test_usage_and_stop_reason_are_no_placeholder_lines(
    answered: Thread, command: tuple[str, ...]
) -> None:
    result = ore(*command)
    assert result.exit_code == 0, result.output
    assert "[usage]" not in result.output
    assert "[stop_reason]" not in result.output
    assert "a framework" in result.output


def test_show_json_keeps_usage_and_stop_reason(answered: Thread) -> None:
    shown = json.loads(ore("threads", "show", "t1", "--json").output)
    kinds = [artifact["kind"] for artifact in shown["turns"][-1]["artifacts"]]
    assert kinds == ["text", "usage", "stop_reason"]


def test_show_takes_format_json_like_export(answered: Thread) -> None:
    assert ore("threads", "show", "t1", "--format", "json").output == (
        ore("threads", "show", "t1", "--json").output
    )


def test_export_takes_json_like_show(answered: Thread) -> None:
    assert ore("threads", "export", "t1", "--json").output == (
        ore("threads", "export", "t1", "--format", "json").output
    )


def test_fork_takes_a_unique_prefix_of_a_turn_id(answered: Thread) -> None:
    question = answered.turns()[0].id
    result = ore("threads", "fork", "t1", question[:6])
    assert result.exit_code == 0, result.output
    assert f"at turn {question}:" in result.output
    assert json.loads(ore("threads", "show", "t1", "--json").output)["current_tip"] == question


def test_fork_refuses_an_ambiguous_turn_prefix_in_one_line(tmp_path: Path) -> None:
    async def write() -> None:
        store = SQLiteStore(tmp_path / "threads.db")
        try:
            thread = await store.create("t2")
            thread.save_turn(Turn("abc111", Role.USER, (Text("one"),)))
            thread.save_turn(Turn("abc222", Role.ASSISTANT, (Text("two"),), parent_id="abc111"))
            await store.save(thread)
        finally:
            await store.close()

    asyncio.run(write())
    result = ore("threads", "fork", "t2", "abc")
    assert result.exit_code == 1
    assert "turn id abc is ambiguous in thread t2 (abc111, abc222)" in result.output
