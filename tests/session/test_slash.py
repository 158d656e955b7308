"""Slash commands (docs/go-compatibility.md, "The behaviour kept") through a real Manager."""

from __future__ import annotations

import pytest

from ore_core import (
    CommandError,
    Manager,
    Notice,
    NoticeEvent,
    Role,
    SessionSwitchEvent,
    Severity,
    Stream,
    UserMessageEvent,
)
from ore_core.config import OreSettings
from ore_core.plugins.manager import create_plugin_manager
from ore_core.plugins.registry import collect_registrations
from ore_core.session.echo import EchoProcessor
from ore_core.session.slash import (
    Command,
    CommandResult,
    SlashCommands,
    default_commands,
    parse_command,
)
from ore_core.session.stores.memory import MemoryStore
from ore_core.testing.processors import ScriptedProcessor
from tests.session.support import collect, message


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("/help", ("help", "")),
        ("  \t\n/model gpt-4o", ("model", "gpt-4o")),
        ("/   include   /path/with spaces", ("include", "  /path/with spaces")),
        ("/", ("", "")),
        ("/model", ("model", "")),
        ("hello /model", None),
        ("", None),
    ],
)
def test_parse_command_rules(text: str, parsed: tuple[str, str] | None) -> None:
    assert parse_command(text) == parsed


async def _run(commands: SlashCommands, text: str) -> tuple[list[NoticeEvent], Stream]:
    processor = ScriptedProcessor(["model reply"])
    async with Manager(MemoryStore(), processor, interceptors=[commands]) as manager:
        stream = await manager.create()
        sub = stream.subscribe("notice", "lifecycle")
        await stream.process(message(text))
        events = await collect(sub)
    return [e for e in events if isinstance(e, NoticeEvent)], stream


async def test_bound_command_consumes_the_message_and_sees_empty_input() -> None:
    seen: list[Command] = []

    async def handler(command: Command) -> CommandResult:
        seen.append(command)
        return CommandResult()

    commands = SlashCommands()
    commands.bind("ping", "Ping", handler)
    notices, stream = await _run(commands, "/ping")
    assert seen[0].input == ""
    assert notices == []
    assert stream.turns() == []


async def test_unknown_command_is_consumed_with_an_info_notice() -> None:
    notices, stream = await _run(SlashCommands(), "/Other")
    assert notices[0].severity is Severity.INFO
    assert "Unknown command: /Other" in notices[0].content
    assert "/help" in notices[0].content
    assert stream.turns() == []


async def test_handler_error_becomes_an_error_notice() -> None:
    async def broken(command: Command) -> CommandResult:
        raise CommandError("it broke")

    commands = SlashCommands()
    commands.bind("x", "X", broken)
    notices, _ = await _run(commands, "/x")
    assert (notices[0].content, notices[0].severity) == ("it broke", Severity.ERROR)


async def test_handler_notice_beats_its_error_text() -> None:
    async def broken(command: Command) -> CommandResult:
        raise CommandError("internal", Notice("friendly", Severity.WARN))

    commands = SlashCommands()
    commands.bind("x", "X", broken)
    notices, _ = await _run(commands, "/x")
    assert (notices[0].content, notices[0].severity) == ("friendly", Severity.WARN)


async def test_replacement_event_continues_to_the_processor() -> None:
    async def rewrite(command: Command) -> CommandResult:
        return CommandResult(replace=command.event.model_copy(update={"content": "rewritten"}))

    commands = SlashCommands()
    commands.bind("say", "Say", rewrite)
    _, stream = await _run(commands, "/say something")
    assert [t.role for t in stream.turns()] == [Role.USER, Role.ASSISTANT]
    assert stream.turns()[0].artifacts[0].content == "rewritten"  # type: ignore[attr-defined]


async def test_empty_notice_is_suppressed() -> None:
    async def quiet(command: Command) -> CommandResult:
        return CommandResult(notice=Notice(""))

    commands = SlashCommands()
    commands.bind("q", "Q", quiet)
    notices, _ = await _run(commands, "/q")
    assert notices == []


async def test_plain_messages_pass_through_to_the_processor() -> None:
    notices, stream = await _run(SlashCommands(), "no command here")
    assert notices == []
    assert len(stream.turns()) == 2


async def test_help_lists_every_command_sorted_with_descriptions() -> None:
    notices, _ = await _run(default_commands(), "/help")
    lines = notices[0].content.splitlines()
    assert lines[0] == "Available commands:"
    names = [line.split()[0] for line in lines[1:]]
    assert names == sorted(names)
    model = next(line for line in lines if line.split()[0] == "/model")
    assert model.endswith("  Choose the model for the next turns: /model NAME")


async def test_help_is_plain_text_in_columns_not_markdown() -> None:
    """Issue 28: conduits print notices as written, so `*` and backticks showed raw."""
    notices, _ = await _run(default_commands(), "/help")
    lines = notices[0].content.splitlines()
    assert "`" not in notices[0].content
    assert not any(line.lstrip().startswith("*") for line in lines)
    columns = {line.index(line.split()[1]) for line in lines[1:]}
    assert len(columns) == 1  # every description starts in the same column


async def test_help_alone_has_exactly_one_newline() -> None:
    notices, _ = await _run(SlashCommands(), "/help")
    assert notices[0].content.count("\n") == 1


async def test_rebinding_overwrites_handler_and_description() -> None:
    commands = SlashCommands()

    async def first(command: Command) -> CommandResult:
        return CommandResult(notice=Notice("first"))

    async def second(command: Command) -> CommandResult:
        return CommandResult(notice=Notice("second"))

    commands.bind("x", "one", first)
    commands.bind("x", "two", second)
    notices, _ = await _run(commands, "/x")
    assert notices[0].content == "second"
    assert commands.commands()["x"] == "two"


async def test_model_command_changes_the_model_the_processor_gets() -> None:
    processor = ScriptedProcessor()
    async with Manager(MemoryStore(), processor, interceptors=[default_commands()]) as manager:
        stream = await manager.create()
        await stream.process(message("/model small-model"))
        await stream.process(message("hi"))
    assert processor.seen_specs[-1].name == "small-model"
    assert stream.get_metadata("ore.model.name") == "small-model"


async def test_model_without_a_name_shows_the_current_model_and_usage() -> None:
    notices, _ = await _run(default_commands(), "/model")
    assert notices[0].content == "Current model: the processor's default. Usage: /model <name>"


async def test_model_shows_the_model_chosen_before() -> None:
    async with Manager(
        MemoryStore(), ScriptedProcessor(), interceptors=[default_commands()]
    ) as manager:
        stream = await manager.create()
        await stream.process(message("/model small-model"))
        sub = stream.subscribe("notice", "lifecycle")
        await stream.process(message("/model"))
        notices = [e for e in await collect(sub) if isinstance(e, NoticeEvent)]
    assert notices[0].content == "Current model: small-model. Usage: /model <name>"


async def test_model_under_echo_says_it_cannot_switch_and_changes_nothing() -> None:
    async with Manager(
        MemoryStore(), EchoProcessor(), interceptors=[default_commands()]
    ) as manager:
        stream = await manager.create()
        sub = stream.subscribe("notice", "lifecycle")
        await stream.process(message("/model gpt-4o"))
        notices = [e for e in await collect(sub) if isinstance(e, NoticeEvent)]
    assert notices[0].severity is Severity.WARN
    assert notices[0].content.startswith("echo (it repeats your message; no model) answers here")
    assert "no models to choose from" in notices[0].content
    assert stream.get_metadata("ore.model.name") is None


async def test_undo_removes_the_last_exchange_and_keeps_it_stored() -> None:
    async with Manager(
        MemoryStore(), ScriptedProcessor(["a1", "a2"]), interceptors=[default_commands()]
    ) as manager:
        stream = await manager.create()
        await stream.process(message("u1"))
        await stream.process(message("u2"))
        await stream.process(message("/undo"))
        stored = await manager.store.get(stream.id)
    assert [t.artifacts[0].content for t in stored.turns()] == ["u1", "a1"]  # type: ignore[attr-defined]
    assert len(stored.all_turns()) == 4


async def test_fork_starts_a_branch_at_an_earlier_turn_and_branches_lists_both() -> None:
    async with Manager(
        MemoryStore(), ScriptedProcessor(["a1", "a2", "a3"]), interceptors=[default_commands()]
    ) as manager:
        stream = await manager.create()
        await stream.process(message("u1"))
        await stream.process(message("u2"))
        first_answer = stream.turns()[1].id
        await stream.process(message(f"/fork {first_answer}"))
        await stream.process(message("u2-alt"))
        sub = stream.subscribe("notice")
        await stream.process(message("/branches"))
        listing = (await collect(sub, until=lambda e: True))[0]
    assert [t.artifacts[0].content for t in stream.turns()] == [  # type: ignore[attr-defined]
        "u1",
        "a1",
        "u2-alt",
        "a3",
    ]
    assert isinstance(listing, NoticeEvent)
    assert listing.content.startswith("Branches (2):")


async def test_fork_of_an_unknown_turn_is_an_error_notice() -> None:
    notices, _ = await _run(default_commands(), "/fork nope")
    assert notices[0].severity is Severity.ERROR
    assert "nope" in notices[0].content


async def test_meta_shows_and_sets_metadata() -> None:
    async with Manager(
        MemoryStore(), ScriptedProcessor(), interceptors=[default_commands()]
    ) as manager:
        stream = await manager.create()
        sub = stream.subscribe("notice")
        await stream.process(message("/meta title My chat"))
        await stream.process(message("/meta title"))
        await stream.process(message("/meta"))
        notices = await collect(sub, count=3, until=lambda e: True)
    assert [n.content for n in notices] == [  # type: ignore[attr-defined]
        "title = My chat",
        "title = My chat",
        "title = My chat",
    ]


async def test_new_creates_a_thread_and_tells_the_conduit_to_switch() -> None:
    async with Manager(
        MemoryStore(), ScriptedProcessor(), interceptors=[default_commands()]
    ) as manager:
        stream = await manager.create()
        sub = stream.subscribe("session_switch")
        await stream.process(message("/new"))
        switch = (await collect(sub, until=lambda e: True))[0]
        assert isinstance(switch, SessionSwitchEvent)
        assert switch.session_id != stream.id
        assert (await manager.store.get(switch.session_id)).turns() == []


async def test_non_message_events_pass_through_unchanged() -> None:
    commands = SlashCommands()
    event = SessionSwitchEvent(session_id="abc")
    result = await commands.intercept(event, None)  # type: ignore[arg-type]
    assert result.event is event
    assert isinstance(UserMessageEvent(content="x"), UserMessageEvent)


async def test_help_lists_the_compaction_commands_the_compaction_step_runs() -> None:
    pm = create_plugin_manager(load_entry_points=False)
    registrations = collect_registrations(pm, OreSettings())
    (commands,) = [i for i in registrations.interceptors if isinstance(i, SlashCommands)]
    notices, _ = await _run(commands, "/help")
    lines = {line.split()[0]: line for line in notices[0].content.splitlines()[1:]}
    assert lines["/compact"].endswith("  Summarise the earlier conversation now: /compact [FOCUS]")
    assert "/uncompact" in lines
