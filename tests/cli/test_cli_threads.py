"""`ore threads list|show|fork|delete` against real stores populated through a real Manager."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result

from ore_core import EventContext, Role, Text, Thread, ThreadNotFound, UserMessageEvent
from ore_core.cli.app import build_runtime
from ore_core.cli.threads import UNANSWERED
from ore_core.config import OreSettings
from ore_core.errors import TurnFailed
from ore_core.events import ReactEvent
from ore_core.plugins.manager import create_plugin_manager
from ore_core.session.compaction import BOUNDARY_INFO_KEY, BoundaryInfo, plan_cut, store_compaction
from ore_core.session.manager import Manager
from ore_core.session.stores import JSONStore, SQLiteStore
from ore_core.session.turn_context import TurnContext
from tests.cli.conftest import ore
from tests.ore_process import ORE


@dataclass(frozen=True)
class Populated:
    """The store the tests read: thread `demo` with two branches, thread `other`."""

    store: dict[str, Any]
    demo: Thread
    other: Thread

    def turn(self, text: str, role: str = "user") -> str:
        """Id of the `demo` turn with `role` saying `text`."""
        (turn_id,) = [
            turn.id
            for turn in self.demo.all_turns()
            if turn.role == role and turn.artifacts[0].to_dict()["content"] == text
        ]
        return turn_id


def say(store: dict[str, Any], thread_id: str, *texts: str, create: bool = False) -> Thread:
    """Send `texts` to `thread_id` through a real runtime (echo, slash commands); reload it."""

    async def send() -> Thread:
        config = OreSettings(store=store)
        async with await build_runtime(config, create_plugin_manager()) as runtime:
            if create:
                stream = await runtime.manager.create_with_id(thread_id, {"title": "Demo"})
            else:
                stream = await runtime.manager.attach(thread_id)
            for text in texts:
                await stream.process(UserMessageEvent(content=text))
            return await runtime.store.get(thread_id)

    return asyncio.run(send())


def stored(store: dict[str, Any], thread_id: str) -> Thread:
    async def get() -> Thread:
        opened = SQLiteStore(store["path"])
        try:
            return await opened.get(thread_id)
        finally:
            await opened.close()

    return asyncio.run(get())


@pytest.fixture(autouse=True)
def _isolated(ore_isolated_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORE_LOAD_PLUGINS", "")  # no test plugins from the venv


@pytest.fixture
def populated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Populated:
    store = {"name": "sqlite", "path": str(tmp_path / "threads.db")}
    monkeypatch.setenv("ORE_STORE__NAME", "sqlite")
    monkeypatch.setenv("ORE_STORE__PATH", store["path"])
    say(store, "demo", "hello there", "first try", "/undo", "second try", create=True)
    other = say(store, "other", "another conversation", create=True)
    return Populated(store, stored(store, "demo"), other)


def assert_one_error_line(result: Result, *fragments: str) -> None:
    assert result.exit_code == 1
    (line,) = result.stderr.splitlines()
    assert line.startswith("Error: ")
    for fragment in fragments:
        assert fragment in line


# --- list --------------------------------------------------------------------------


def test_list_shows_each_thread_with_its_turn_count_and_latest_text(
    populated: Populated,
) -> None:
    result = ore("threads", "list")
    assert result.exit_code == 0, result.output
    header, *rows = result.stdout.splitlines()
    assert header.split() == ["ID", "TURNS", "UPDATED", "TITLE", "LAST"]
    assert [(row.split()[0], row.split()[1]) for row in rows] == [("other", "2"), ("demo", "6")]
    assert rows[1].split()[-3:] == ["Demo", "second", "try"]  # title, then the last text


def test_list_json_has_id_turns_branches_updated_preview_and_metadata(
    populated: Populated,
) -> None:
    result = ore("threads", "list", "--json")
    assert result.exit_code == 0, result.output
    demo = {entry["id"]: entry for entry in json.loads(result.stdout)}["demo"]
    assert demo["turns"] == 6
    assert demo["branches"] == 2
    assert demo["preview"] == "second try"
    assert demo["metadata"] == {"title": "Demo"}
    assert demo["updated"].endswith("Z")


def test_list_puts_the_most_recently_updated_thread_first(populated: Populated) -> None:
    say(populated.store, "demo", "one more")
    result = ore("threads", "list", "--json")
    assert [entry["id"] for entry in json.loads(result.stdout)] == ["demo", "other"]


def test_list_of_an_empty_store_says_which_store_is_empty(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ORE_STORE__PATH", str(tmp_path / "empty.db"))
    result = ore("threads", "list")
    assert result.exit_code == 0, result.output
    assert result.stdout == f"No threads in sqlite:{tmp_path / 'empty.db'}.\n"


# --- show --------------------------------------------------------------------------


def test_show_prints_the_active_path_oldest_first_without_other_branches(
    populated: Populated,
) -> None:
    result = ore("threads", "show", "demo")
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert text.index("hello there") < text.index("second try")
    assert "first try" not in text
    assert f"tip {populated.turn('second try', 'assistant')}: 4 of 6 turns" in text
    assert "title = Demo" in text


def test_show_says_that_a_last_message_got_no_answer(populated: Populated) -> None:
    async def fail_a_turn() -> None:
        async def broken_model(ctx: TurnContext) -> None:
            raise RuntimeError("the model server is down")

        store = SQLiteStore(populated.store["path"])
        manager = Manager(store, broken_model)
        try:
            stream = await manager.attach("other")
            with pytest.raises(TurnFailed):
                await stream.process(UserMessageEvent(content="are you there?"))
        finally:
            await manager.aclose()
            await store.close()

    assert not ore("threads", "show", "other").stdout.rstrip().endswith(f"({UNANSWERED})")
    asyncio.run(fail_a_turn())
    lines = ore("threads", "show", "other").stdout.splitlines()
    assert lines[-2:] == ["  are you there?", f"  ({UNANSWERED})"]


def test_show_lists_a_turns_reactions_under_it(populated: Populated) -> None:
    async def react() -> None:
        store = SQLiteStore(populated.store["path"])
        manager = Manager(store, broken_model_never_called)
        try:
            stream = await manager.attach("other")
            turn_id = stream.turns()[0].id
            for user, emoji in (("ana", "👍"), ("ben", "👍"), ("ana", "🎉")):
                context = EventContext(provenance="discord", user=user)
                await stream.process(ReactEvent(turn_id=turn_id, emoji=emoji, context=context))
        finally:
            await manager.aclose()
            await store.close()

    asyncio.run(react())
    lines = ore("threads", "show", "other").stdout.splitlines()
    question = lines.index("  another conversation")
    assert lines[question + 1] == "  (reactions: 👍 2, 🎉 1)"
    shown = json.loads(ore("threads", "show", "other", "--json").stdout)
    reactions = json.loads(shown["turns"][0]["metadata"]["reactions"])
    assert reactions == {"👍": ["discord:ana", "discord:ben"], "🎉": ["discord:ana"]}


async def broken_model_never_called(ctx: TurnContext) -> None:
    raise AssertionError("a reaction ran the model")


def test_show_json_lists_the_active_path_turns(populated: Populated) -> None:
    result = ore("threads", "show", "demo", "--json")
    assert result.exit_code == 0, result.output
    shown = json.loads(result.stdout)
    assert [turn["id"] for turn in shown["turns"]] == [turn.id for turn in populated.demo.turns()]
    assert shown["current_tip"] == populated.demo.current_tip


def test_show_all_branches_draws_the_tree_with_the_active_path_and_tip_marked(
    populated: Populated,
) -> None:
    result = ore("threads", "show", "demo", "--all-branches")
    assert result.exit_code == 0, result.output
    turn = populated.turn
    tree = result.stdout.split("\n\n", 1)[1].splitlines()
    assert tree == [
        f"* {turn('hello there')} user: hello there",
        f"* {turn('hello there', 'assistant')} assistant: hello there",
        f"├─ - {turn('first try')} user: first try",
        f"│  - {turn('first try', 'assistant')} assistant: first try",
        f"└─ * {turn('second try')} user: second try",
        f"   * {turn('second try', 'assistant')} assistant: second try  <- tip",
    ]


def test_show_all_branches_json_has_every_turn_the_branches_and_the_path(
    populated: Populated,
) -> None:
    result = ore("threads", "show", "demo", "--all-branches", "--json")
    shown = json.loads(result.stdout)
    assert len(shown["turns"]) == 6
    assert shown["branches"] == [leaf.id for leaf in populated.demo.branches()]
    assert shown["active_path"] == [turn.id for turn in populated.demo.turns()]


# --- fork --------------------------------------------------------------------------


def test_fork_moves_the_tip_so_the_next_message_branches_there(populated: Populated) -> None:
    first_answer = populated.turn("first try", "assistant")
    result = ore("threads", "fork", "demo", first_answer)
    assert result.exit_code == 0, result.output
    after = say(populated.store, "demo", "third try")
    user_turn = after.turns()[-2]
    assert (user_turn.parent_id, user_turn.artifacts[0].to_dict()["content"]) == (
        first_answer,
        "third try",
    )


def test_fork_at_an_unknown_turn_fails_in_one_line_and_keeps_the_tip(
    populated: Populated,
) -> None:
    assert_one_error_line(ore("threads", "fork", "demo", "feedfacefeedface"), "feedfacefeedface")
    assert stored(populated.store, "demo").current_tip == populated.demo.current_tip


# --- delete ------------------------------------------------------------------------


def test_delete_with_yes_removes_the_thread(populated: Populated) -> None:
    result = ore("threads", "delete", "demo", "-y")
    assert result.exit_code == 0, result.output
    with pytest.raises(ThreadNotFound):
        stored(populated.store, "demo")


def test_delete_asks_first_and_keeps_the_thread_when_declined(populated: Populated) -> None:
    result = ore("threads", "delete", "demo", input="n\n")
    assert result.exit_code == 1
    assert "Delete thread demo (6 turns)" in result.stdout
    assert len(stored(populated.store, "demo")) == 6


# --- errors ------------------------------------------------------------------------


UNKNOWN_THREAD_COMMANDS = [
    ["show", "ghost"],
    ["show", "ghost", "--all-branches"],
    ["fork", "ghost", "t"],
    ["delete", "ghost", "-y"],
]


@pytest.mark.parametrize("command", UNKNOWN_THREAD_COMMANDS)
def test_unknown_thread_is_one_error_line_naming_it_and_exit_1(
    populated: Populated, command: list[str]
) -> None:
    assert_one_error_line(ore("threads", *command), "thread ghost not found", "sqlite:")


def test_invalid_thread_id_is_one_error_line(populated: Populated) -> None:
    assert_one_error_line(ore("threads", "show", "../etc"), "invalid thread id '../etc'")


# --- other stores ------------------------------------------------------------------


@pytest.fixture
def json_dir(tmp_path: Path) -> Path:
    """A JSON store with a readable thread `good` and a corrupt file `bad.json`."""
    directory = tmp_path / "json-threads"
    say({"name": "json", "path": str(directory)}, "good", "kept", create=True)
    (directory / "bad.json").write_text("{not json")
    return directory


def test_store_options_override_the_configured_store(populated: Populated, json_dir: Path) -> None:
    result = ore("threads", "--store", "json", "--store-path", str(json_dir), "list", "--json")
    assert result.exit_code == 0, result.output
    assert [entry["id"] for entry in json.loads(result.stdout)] == ["good"]


def test_corrupt_thread_is_one_error_line(json_dir: Path) -> None:
    result = ore("threads", "--store", "json", "--store-path", str(json_dir), "show", "bad")
    assert_one_error_line(result, "bad")


def test_a_corrupt_thread_can_be_deleted(json_dir: Path) -> None:
    result = ore("threads", "--store", "json", "--store-path", str(json_dir), "delete", "bad", "-y")
    assert result.exit_code == 0, result.output

    async def ids() -> list[str]:
        store = JSONStore(json_dir)
        try:
            return await store.list_ids()
        finally:
            await store.close()

    assert asyncio.run(ids()) == ["good"]


@pytest.mark.slow  # starts a process
def test_unknown_store_name_is_one_error_line_listing_the_known_ones(populated: Populated) -> None:
    assert_one_error_line(ore("threads", "--store", "nope", "list"), 'no store named "nope"')


# --- a real process ----------------------------------------------------------------


def run_ore(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(ORE), *args], capture_output=True, text=True, env=dict(os.environ), timeout=60
    )


@pytest.mark.slow  # starts a process
def test_ore_threads_show_runs_as_a_real_process(populated: Populated) -> None:
    shown = run_ore("threads", "show", "demo", "--all-branches")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.count("<- tip") == 1


@pytest.mark.slow  # starts a process
def test_ore_threads_in_a_real_process_reports_an_unknown_id_in_one_stderr_line(
    populated: Populated,
) -> None:
    missing = run_ore("threads", "show", "ghost")
    assert missing.returncode == 1
    assert missing.stderr.splitlines() == [
        f"Error: thread ghost not found in sqlite:{populated.store['path']}: "
        "`ore threads list` shows them"
    ]


# --- ids like git: prefixes, short ids, titles, empty threads, export -----------------


@pytest.fixture
def hex_threads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Threads with ids that share prefixes, and an empty one."""
    store = {"name": "sqlite", "path": str(tmp_path / "threads.db")}
    monkeypatch.setenv("ORE_STORE__PATH", store["path"])
    say(store, "90d61eb0aa", "first words", create=True)
    say(store, "90d61eb0bb", "other words", create=True)
    say(store, "7f00ee", "single", create=True)

    async def empty() -> None:
        opened = SQLiteStore(store["path"])
        try:
            await opened.create("e1e1e1")
        finally:
            await opened.close()

    asyncio.run(empty())
    return store


def test_a_unique_prefix_names_the_thread_everywhere(hex_threads: dict[str, Any]) -> None:
    shown = ore("threads", "show", "7f")
    assert shown.exit_code == 0, shown.output
    assert shown.stdout.startswith("thread 7f00ee in sqlite:")
    exported = ore("threads", "export", "90d61eb0a", "--format", "json")
    assert json.loads(exported.stdout)["id"] == "90d61eb0aa"
    deleted = ore("threads", "delete", "-y", "7f0")
    assert deleted.stdout == "Deleted thread 7f00ee.\n"


def test_an_ambiguous_prefix_is_one_line_listing_the_candidates(
    hex_threads: dict[str, Any],
) -> None:
    assert_one_error_line(
        ore("threads", "show", "90d6"),
        "thread id 90d6 is ambiguous",
        "90d61eb0aa, 90d61eb0bb",
        "type more of it",
    )


def test_list_shows_short_ids_and_titles_and_hides_empty_threads(
    hex_threads: dict[str, Any],
) -> None:
    listed = ore("threads", "list")
    assert listed.exit_code == 0, listed.output
    _header, *rows, note = listed.stdout.splitlines()
    assert sorted(row.split()[0] for row in rows) == ["7f00ee", "90d61eb0", "90d61eb0"]
    assert all(row.split()[4] == "Demo" for row in rows)  # the title metadata
    assert note == "(1 empty thread(s) hidden: --all shows them)"
    everything = ore("threads", "list", "--all", "--json")
    assert "e1e1e1" in [entry["id"] for entry in json.loads(everything.stdout)]


def test_export_as_markdown_has_a_heading_per_turn_of_the_active_path(
    hex_threads: dict[str, Any],
) -> None:
    exported = ore("threads", "export", "7f00ee")
    assert exported.exit_code == 0, exported.output
    lines = exported.stdout.splitlines()
    assert lines[0] == "# Demo"
    assert [line.split(" (")[0] for line in lines if line.startswith("## ")] == [
        "## User",
        "## Assistant",
    ]
    assert lines.count("single") == 2  # echo answered with the same words


def test_export_as_json_has_every_turn_and_branch(populated: Populated) -> None:
    exported = ore("threads", "export", "demo", "--format", "json")
    data = json.loads(exported.stdout)
    assert len(data["turns"]) == 6
    assert len(data["branches"]) == 2


@contextmanager
def read_only(*paths: Path) -> Iterator[None]:
    """Make `paths` unwritable, even for root (`chattr +i`); restored afterwards."""
    if os.geteuid() != 0:
        modes = {path: path.stat().st_mode for path in paths}
        for path in paths:
            path.chmod(0o555 if path.is_dir() else 0o444)
        try:
            yield
        finally:
            for path, mode in modes.items():
                path.chmod(mode)
        return
    chattr = shutil.which("chattr")
    if chattr is None or subprocess.run([chattr, "+i", *map(str, paths)], check=False).returncode:
        pytest.skip("cannot make a file read-only for root here (chattr +i)")
    try:
        yield
    finally:
        subprocess.run([chattr, "-i", *map(str, paths)], check=True)


@pytest.mark.slow  # starts chattr
def test_listing_and_reading_need_no_write_access_to_the_store(populated: Populated) -> None:
    database = Path(populated.store["path"])
    with read_only(database.parent, database):
        listed = ore("threads", "list")
        shown = ore("threads", "show", "demo")
        forked = ore("threads", "fork", "demo", populated.turn("hello there"))
    assert listed.exit_code == 0, listed.output
    assert [row.split()[0] for row in listed.stdout.splitlines()[1:]] == ["other", "demo"]
    assert shown.exit_code == 0, shown.output
    assert forked.exit_code == 1  # changing it does need write access: one line says so
    (line,) = forked.stderr.splitlines()
    assert line.startswith("Error: ")


# --- compaction ----------------------------------------------------------------------


def test_show_tells_the_size_against_the_window_and_the_compaction(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "threads.db"
    monkeypatch.setenv("ORE_STORE__PATH", str(path))
    monkeypatch.setenv("ORE_COMPACTION__CONTEXT_WINDOW", "1000")

    async def compacted() -> BoundaryInfo:
        store = SQLiteStore(path)
        try:
            thread = await store.create()
            for number in range(6):
                thread.append(Role.USER, Text(f"question {number} " + "x" * 200))
                thread.append(Role.ASSISTANT, Text(f"answer {number}"))
            cut = plan_cut(thread.turns(), keep_last=2, pin_first=False)
            assert cut is not None
            summary, info = store_compaction(thread, cut, "short", model="m", dropped_tokens=500)
            thread.set_control(summary.id, "stop")
            thread.meta().set(BOUNDARY_INFO_KEY, info.encode())
            await store.save(thread)
            return info
        finally:
            await store.close()

    info = asyncio.run(compacted())
    result = ore("threads", "show", _only_thread(path))
    assert result.exit_code == 0, result.output
    assert "size: ~" in result.stdout
    assert "% of the 1000-token context window" in result.stdout
    assert (
        f"compacted: summary {info.summary_turn_id} stands for 10 earlier turns (~500 tokens); "
        f"/uncompact returns to tip {info.previous_tip}"
    ) in result.stdout


def _only_thread(path: Path) -> str:
    async def first() -> str:
        store = SQLiteStore(path)
        try:
            (thread_id,) = await store.list_ids()
            return thread_id
        finally:
            await store.close()

    return asyncio.run(first())
