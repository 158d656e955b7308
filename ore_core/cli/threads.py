"""`ore threads`: list, show, fork and delete the threads of the configured store.

Works on the store directly (no Manager, no `ore_startup` hooks), so it is safe to
run next to `ore serve` with a store that several processes may share (sqlite,
json). `--store NAME` and `--store-path PATH` override the `[store]` settings for
one invocation. Every failure (unknown or invalid id, corrupt thread, locked
journal) is one `Error: ...` line and exit status 1.
"""

from __future__ import annotations

import asyncio
import builtins
import functools
import json
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol, TypeVar

import click

from ore_core.artifacts import (
    Artifact,
    Image,
    Reasoning,
    ReasoningSignature,
    StopReason,
    Text,
    ToolCall,
    ToolResult,
    Usage,
)
from ore_core.cli.app import store_section
from ore_core.cli.control_store import open_threads
from ore_core.cli.options import cli_state, table_columns
from ore_core.cli.running import find_running
from ore_core.errors import OreError, ThreadCorrupt, ThreadNotFound, TurnNotFound
from ore_core.id_prefix import resolve_thread_id, short_id
from ore_core.ids import validate_thread_id
from ore_core.ledger.thread import Thread
from ore_core.session.bridging import is_relay
from ore_core.session.compaction import boundary_info, path_tokens
from ore_core.session.reactions import reactions_of
from ore_core.turn import Role, Turn, format_timestamp, turn_to_dict

__all__ = ["served_store_section", "threads"]

_T = TypeVar("_T")


class _Threads(Protocol):
    """What the commands use of a store: a Store, or `ControlStore` for one in NATS."""

    @property
    def name(self) -> str: ...

    async def get(self, thread_id: str) -> Thread: ...

    async def list(self) -> list[Thread]: ...

    async def list_ids(
        self, *, after: str = "", limit: int | None = None
    ) -> builtins.list[str]: ...

    async def save(self, thread: Thread) -> Any: ...

    async def delete(self, thread_id: str) -> bool: ...

    async def close(self) -> None: ...


_PREVIEW_WIDTH = 60
_TITLE_WIDTH = 40


@dataclass(frozen=True, slots=True)
class _StoreChoice:
    """The `--store` / `--store-path` overrides of this invocation."""

    name: str | None
    path: Path | None

    def section(self) -> dict[str, Any]:
        """The `[store]` table to open: the settings' one, overridden by the options.

        A different `--store` drops the configured table: its keys belong to another store.
        """
        settings = cli_state().settings
        section = store_section(settings.store)
        running = find_running()
        if self.name is None and self.path is None and running is not None:
            # The store the running `ore serve` serves, unless the config names one.
            configured = any(
                value.key.startswith("store.") and value.source != "default"
                for value in settings.describe_sources()
            )
            name, _, path = running.store.partition(":")
            if not configured and name and path:
                return {"name": name, "path": Path(path)}
        if self.name is not None and self.name != section["name"]:
            section = {"name": self.name}
        if self.path is not None:
            section["path"] = self.path
        return section


def served_store_section() -> dict[str, Any]:
    """The `[store]` table `ore threads` opens without options: the configured store, or
    the running `ore serve`'s when the config names none (what `ore doctor` checks)."""
    return _StoreChoice(None, None).section()


def _with_store(
    choice: _StoreChoice, action: Callable[[_Threads], Awaitable[_T]], *, read_only: bool = False
) -> _T:
    """Open the chosen store, run `action` on it and close the store, on a fresh loop.

    `read_only` commands open an existing SQLite file read-only: reading threads must
    not need write access to the store.
    """
    state = cli_state()
    section = choice.section()
    if read_only and section["name"] == "sqlite":
        path = Path(section.get("path") or state.settings.store.path).expanduser()
        if path.is_file():
            section = {**section, "read_only": True}

    async def run() -> _T:
        store: _Threads = await open_threads(state.settings, state.plugin_manager, section)
        try:
            return await action(store)
        finally:
            await store.close()

    return asyncio.run(run())


async def _resolve(store: _Threads, typed: str) -> str:
    """The full id of the thread `typed` names (an exact id or a unique prefix)."""

    validate_thread_id(typed)  # a path-like "id" is refused before any lookup

    async def exists(thread_id: str) -> bool:
        try:
            await store.get(thread_id)
        except ThreadNotFound:
            return False
        except ThreadCorrupt:
            return True  # it exists; the command reports what is wrong with it
        return True

    async def list_ids(after: str, limit: int) -> list[str]:
        return await store.list_ids(after=after, limit=limit)

    return await resolve_thread_id(typed, exists, list_ids, _location(store))


def _title(thread: Thread) -> str:
    """The thread's `title` metadata, else its first message, on one line."""
    title = thread.meta().all().get("title", "")
    if title:
        return _shorten(title, _TITLE_WIDTH)
    first = next(iter(thread.turns()), None)
    return _shorten(_preview(first), _TITLE_WIDTH) if first is not None else ""


def _location(store: _Threads) -> str:
    """Where the store keeps threads, as its error messages name it (`sqlite:/path`)."""
    return str(getattr(store, "location", store.name))


# -- rendering -------------------------------------------------------------------------


_BOOKKEEPING = (Usage, StopReason, ReasoningSignature)
"""Artifacts about a model call, not of the conversation: only `--json` shows them."""


def _shown(turn: Turn) -> list[Artifact]:
    """The artifacts of `turn` a reader of the conversation sees."""
    return [artifact for artifact in turn.artifacts if not isinstance(artifact, _BOOKKEEPING)]


def _artifact_text(artifact: Artifact) -> str:
    """How an artifact reads in a terminal (plugin kinds show as `[kind]`)."""
    if isinstance(artifact, Text):
        return artifact.content
    if isinstance(artifact, Reasoning):
        return f"(reasoning) {artifact.content}"
    if isinstance(artifact, ToolCall):
        return f"(tool call {artifact.id}) {artifact.name}({artifact.arguments})"
    if isinstance(artifact, ToolResult):
        error = " error" if artifact.is_error else ""
        return f"(tool result{error} {artifact.tool_call_id}) {artifact.content}"
    if isinstance(artifact, Image):
        return f"[image {_shorten(artifact.url)}]"
    return f"[{artifact.kind}]"


def _shorten(text: str, width: int = _PREVIEW_WIDTH) -> str:
    """`text` on one line, cut to `width` characters with an ellipsis."""
    line = " ".join(text.split())
    return line if len(line) <= width else line[: width - 1] + "…"


def _preview(turn: Turn) -> str:
    return _shorten(" ".join(_artifact_text(artifact) for artifact in _shown(turn)))


def _age(turn: Turn) -> tuple[float, str]:
    """Sort key: oldest first (no timestamp first), then id."""
    stamp = turn.timestamp
    return (stamp.timestamp() if stamp is not None else float("-inf"), turn.id)


def _local_time(stamp: datetime | None) -> str:
    return stamp.astimezone().strftime("%Y-%m-%d %H:%M") if stamp is not None else "-"


def _updated(thread: Thread) -> datetime | None:
    """When the thread last got a turn (None when it has none)."""
    turns = thread.all_turns()
    return max(turns, key=_age).timestamp if turns else None


def _tree_lines(thread: Thread) -> Iterator[str]:
    """Every branch of the thread as a tree; `*` marks the active path, the tip is named.

    A chain without forks stays at one indentation level; each fork indents its
    branches under `├─`/`└─`. Iterative, so a long conversation cannot hit Python's
    recursion limit, and a parent loop (a corrupt tree) is printed once, not forever.
    """
    turns = sorted(thread.all_turns(), key=_age)
    known = {turn.id for turn in turns}
    children: dict[str, list[Turn]] = {}
    roots: list[Turn] = []
    for turn in turns:
        if turn.parent_id in known and turn.parent_id != turn.id:
            children.setdefault(turn.parent_id, []).append(turn)
        else:
            roots.append(turn)
    on_path = {turn.id for turn in thread.turns()}
    tip = thread.current_tip
    seen: set[str] = set()
    # A turn in a parent loop has no root above it: it starts its own tree.
    for root in [*roots, *turns]:
        stack: list[tuple[Turn, str, str]] = [(root, "", "")]
        while stack:
            turn, first, rest = stack.pop()
            if turn.id in seen:
                continue
            seen.add(turn.id)
            mark = "*" if turn.id in on_path else "-"
            suffix = "  <- tip" if turn.id == tip else ""
            yield f"{first}{mark} {turn.id} {turn.role}: {_preview(turn)}{suffix}"
            kids = children.get(turn.id, [])
            if len(kids) == 1:
                stack.append((kids[0], rest, rest))
                continue
            for index in reversed(range(len(kids))):
                branch, through = ("└─ ", "   ") if index == len(kids) - 1 else ("├─ ", "│  ")
                stack.append((kids[index], rest + branch, rest + through))


def _header(thread: Thread, location: str) -> list[str]:
    path = thread.turns()
    lines = [
        f"thread {thread.id} in {location}",
        f"tip {thread.current_tip or '-'}: {len(path)} of {len(thread)} turns on the active "
        f"path, {len(thread.branches())} branch(es)",
    ]
    lines += _compaction_lines(thread, path)
    metadata = sorted(thread.meta().all().items())
    if metadata:
        lines += ["metadata:", *(f"  {key} = {value}" for key, value in metadata)]
    return lines


def _compaction_lines(thread: Thread, path: list[Turn]) -> list[str]:
    """The active path's size against the context window, and its compaction if any."""
    tokens = path_tokens(path)
    window = cli_state().settings.compaction.context_window
    against = (
        f"{tokens / window:.0%} of the {window}-token context window"
        if window
        else "context window: the model's (compaction.context_window not set)"
    )
    lines = [f"size: ~{tokens} tokens on the active path, {against}"]
    try:
        info = boundary_info(thread)
    except OreError as exc:
        return [*lines, f"compacted: {exc}"]
    if info is not None:
        lines.append(
            f"compacted: summary {info.summary_turn_id} stands for {info.dropped_turn_count} "
            f"earlier turns (~{info.dropped_token_estimate} tokens); "
            f"/uncompact returns to tip {info.previous_tip}"
        )
    return lines


def _path_lines(thread: Thread) -> Iterator[str]:
    path = thread.turns()
    for turn in path:
        yield ""
        yield f"{turn.role}  {turn.id}  {_local_time(turn.timestamp)}"
        for artifact in _shown(turn):
            for line in _artifact_text(artifact).splitlines() or [""]:
                yield f"  {line}"
        if reactions := reactions_of(turn):
            counts = ", ".join(f"{emoji} {len(people)}" for emoji, people in reactions.items())
            yield f"  (reactions: {counts})"
    if path and path[-1].role == Role.USER and not is_relay(thread):
        yield f"  ({UNANSWERED})"


UNANSWERED = "no answer: its turn failed or was stopped; send the message again to retry"
"""What `show` says under a last user message without an answer (the error itself was
told to the conduit that sent it, and is in the core's log; a relay thread answers none)."""


def _format_options(
    choices: tuple[str, ...], *, help: str
) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """`--format` (one of `choices`, the first by default) and `--json`, the same as
    `--format json`: the command is given the one `fmt` they choose."""

    def decorate(command: Callable[..., None]) -> Callable[..., None]:
        @functools.wraps(command)
        def run(*args: Any, fmt: str, as_json: bool, **kwargs: Any) -> None:
            command(*args, fmt="json" if as_json else fmt, **kwargs)

        with_json = click.option("--json", "as_json", is_flag=True, help="Same as --format json.")(
            run
        )
        return click.option(
            "--format",
            "fmt",
            type=click.Choice(choices),
            default=choices[0],
            show_default=True,
            help=help,
        )(with_json)

    return decorate


def _echo_json(value: object) -> None:
    click.echo(json.dumps(value, indent=2, ensure_ascii=False))


def _thread_json(thread: Thread, location: str, all_branches: bool) -> dict[str, Any]:
    path = thread.turns()
    shown = sorted(thread.all_turns(), key=_age) if all_branches else path
    out: dict[str, Any] = {
        "id": thread.id,
        "store": location,
        "current_tip": thread.current_tip,
        "metadata": thread.meta().all(),
        "turns": [turn_to_dict(turn) for turn in shown],
    }
    if all_branches:
        out["active_path"] = [turn.id for turn in path]
        out["branches"] = [turn.id for turn in thread.branches()]
    return out


# -- commands ----------------------------------------------------------------------------


@click.group()
@click.option("--store", "store_name", help="Store to use (default: store.name in the config).")
@click.option(
    "--store-path",
    type=click.Path(path_type=Path),
    help="Where that store keeps threads (default: store.path, else the store's default).",
)
@click.pass_context
def threads(ctx: click.Context, store_name: str | None, store_path: Path | None) -> None:
    """List, show, fork, delete and export stored threads.

    A thread id may be shortened to any unique prefix (like a git commit).
    """
    ctx.obj = _StoreChoice(store_name, store_path)


@threads.command("list")
@click.option("--all", "include_empty", is_flag=True, help="Include threads without turns.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (full ids).")
@click.pass_obj
def list_command(choice: _StoreChoice, include_empty: bool, as_json: bool) -> None:
    """Every readable thread, most recently updated first (short ids, like git).

    Any unique prefix of an id works wherever a thread id is typed.
    """

    async def read(store: _Threads) -> tuple[list[Thread], str]:
        return await store.list(), _location(store)

    found, location = _with_store(choice, read, read_only=True)
    hidden = 0 if include_empty else sum(1 for thread in found if len(thread) == 0)
    found = [thread for thread in found if include_empty or len(thread) > 0]
    dated = sorted(((_updated(thread), thread) for thread in found), key=_newest_first)
    summaries = [_summary(thread, updated) for updated, thread in dated]
    if as_json:
        _echo_json(summaries)
        return
    if summaries:
        table = [("ID", "TURNS", "UPDATED", "TITLE", "LAST")]
        table += [
            (
                short_id(summary["id"]),
                str(summary["turns"]),
                _local_time(updated),
                summary["title"] or "-",
                summary["preview"],
            )
            for summary, (updated, _) in zip(summaries, dated, strict=True)
        ]
        click.echo("\n".join(table_columns(table)))
    else:
        click.echo(f"No threads in {location}.")
    if hidden:
        click.echo(f"({hidden} empty thread(s) hidden: --all shows them)")


def _newest_first(entry: tuple[datetime | None, Thread]) -> tuple[float, str]:
    updated, thread = entry
    return (-updated.timestamp() if updated is not None else float("inf"), thread.id)


def _summary(thread: Thread, updated: datetime | None) -> dict[str, Any]:
    path = thread.turns()
    return {
        "id": thread.id,
        "title": _title(thread),
        "turns": len(thread),
        "branches": len(thread.branches()),
        "updated": format_timestamp(updated) if updated is not None else None,
        "preview": _preview(path[-1]) if path else "",
        "metadata": thread.meta().all(),
    }


@threads.command("show")
@click.argument("thread_id")
@click.option("--all-branches", is_flag=True, help="Show every branch as a tree.")
@_format_options(("text", "json"), help="Text to read, or JSON.")
@click.pass_obj
def show_command(choice: _StoreChoice, thread_id: str, all_branches: bool, fmt: str) -> None:
    """The conversation of THREAD_ID along its active path (or every branch)."""

    async def read(store: _Threads) -> tuple[Thread, str]:
        return await store.get(await _resolve(store, thread_id)), _location(store)

    thread, location = _with_store(choice, read, read_only=True)
    if fmt == "json":
        _echo_json(_thread_json(thread, location, all_branches))
        return
    body = ["", *_tree_lines(thread)] if all_branches else list(_path_lines(thread))
    click.echo("\n".join([*_header(thread, location), *body]))


@threads.command("fork")
@click.argument("thread_id")
@click.argument("turn_id")
@click.pass_obj
def fork_command(choice: _StoreChoice, thread_id: str, turn_id: str) -> None:
    """Move the tip of THREAD_ID to TURN_ID: the next message starts a branch there."""

    async def fork(store: _Threads) -> tuple[str, str]:
        thread = await store.get(await _resolve(store, thread_id))
        turn = _resolve_turn(thread, turn_id)
        thread.fork(turn)
        await store.save(thread)
        return thread.id, turn

    full, turn = _with_store(choice, fork)
    click.echo(f"Forked thread {full} at turn {turn}: the next message branches there.")


def _resolve_turn(thread: Thread, typed: str) -> str:
    """The full id of the turn `typed` names: an exact id or a unique prefix of one.

    Anything else is returned as typed, for `Thread.fork` to report as unknown.
    """
    ids = [turn.id for turn in thread.all_turns()]
    if not typed or typed in ids:
        return typed
    matches = sorted(turn_id for turn_id in ids if turn_id.startswith(typed))
    if len(matches) > 1:
        shown = ", ".join(matches[:5]) + (", ..." if len(matches) > 5 else "")
        raise TurnNotFound(
            f"turn id {typed} is ambiguous in thread {thread.id} ({shown}): type more of it"
        )
    return matches[0] if matches else typed


@threads.command("delete")
@click.argument("thread_id")
@click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation.")
@click.pass_obj
def delete_command(choice: _StoreChoice, thread_id: str, yes: bool) -> None:
    """Delete THREAD_ID and every turn of it from the store."""

    async def delete(store: _Threads) -> str:
        full = await _resolve(store, thread_id)
        try:
            size = f"{len(await store.get(full))} turns"
        except ThreadCorrupt:
            size = "unreadable"  # a corrupt thread is exactly what one wants to delete
        if not yes:
            question = f"Delete thread {full} ({size}) from {_location(store)}?"
            click.confirm(question, abort=True)
        if not await store.delete(full):
            raise ThreadNotFound(f"thread {full} not found in {_location(store)}")
        return full

    full = _with_store(choice, delete)
    click.echo(f"Deleted thread {full}.")


@threads.command("export")
@click.argument("thread_id")
@_format_options(
    ("markdown", "json"),
    help="Markdown to read or share; JSON (every turn, every branch) to process.",
)
@click.pass_obj
def export_command(choice: _StoreChoice, thread_id: str, fmt: str) -> None:
    """Print THREAD_ID as Markdown (the active path) or JSON (the whole tree)."""

    async def read(store: _Threads) -> tuple[Thread, str]:
        return await store.get(await _resolve(store, thread_id)), _location(store)

    thread, location = _with_store(choice, read, read_only=True)
    if fmt == "json":
        _echo_json(_thread_json(thread, location, all_branches=True))
        return
    click.echo("\n".join(_markdown_lines(thread)))


def _markdown_lines(thread: Thread) -> Iterator[str]:
    """The active path as Markdown: a heading per turn, the artifacts as written."""
    yield f"# {_title(thread) or 'Thread ' + thread.id}"
    yield ""
    yield f"Thread `{thread.id}`, {len(thread.turns())} turns on the active path."
    for turn in thread.turns():
        yield ""
        yield f"## {str(turn.role).capitalize()} ({_local_time(turn.timestamp)})"
        yield ""
        for artifact in _shown(turn):
            yield _artifact_text(artifact)
