"""Slash commands: an interceptor that turns `/name input` messages into actions.

Parsing (as the seed): leading spaces, tabs and newlines are ignored; after `/`
whitespace is skipped; the name runs to the next whitespace character; the input is
everything after that single separator, unchanged. Names are case-sensitive. An
unknown command is consumed with an Info notice pointing at `/help`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from ore_core.errors import OreError
from ore_core.events import (
    IngressEvent,
    Notice,
    SessionSwitchEvent,
    Severity,
    UserMessageEvent,
    new_event_id,
)
from ore_core.session.protocols import InterceptResult
from ore_core.session.spec import KEY_MODEL_NAME
from ore_core.session.stream import Stream
from ore_core.turn import Turn

__all__ = ["Command", "CommandError", "CommandResult", "SlashCommands", "parse_command"]

_LEADING = " \t\r\n"


@dataclass(frozen=True, slots=True)
class Command:
    """A parsed command: its name, the raw input after it, and where it came from."""

    name: str
    input: str
    event: UserMessageEvent
    stream: Stream


@dataclass(slots=True)
class CommandResult:
    """`replace` continues processing with another event (None consumes the message)."""

    replace: IngressEvent | None = None
    notice: Notice | None = None


class CommandError(OreError):
    """Raised by a handler; shown to the sender as a notice (its own, or an Error)."""

    def __init__(self, message: str, notice: Notice | None = None) -> None:
        super().__init__(message)
        self.notice = notice


Handler = Callable[[Command], Awaitable[CommandResult]]


def parse_command(text: str) -> tuple[str, str] | None:
    """`(name, input)` when `text` is a slash command, else None."""
    text = text.lstrip(_LEADING)
    if not text.startswith("/"):
        return None
    rest = text[1:].lstrip()
    for index, char in enumerate(rest):
        if char.isspace():
            return rest[:index], rest[index + 1 :]
    return rest, ""


@dataclass(slots=True)
class _Binding:
    description: str
    handler: Handler | None
    """None for a command another interceptor runs (listed by `/help` only)."""


@dataclass
class SlashCommands:
    """The command registry and interceptor. `help` is always bound."""

    name: str = "slash"
    order: int = 0
    _commands: dict[str, _Binding] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.bind("help", "Show available slash commands", self._help)

    def bind(self, name: str, description: str, handler: Handler) -> None:
        """Bind (or rebind) `/name`."""
        self._commands[name] = _Binding(description, handler)

    def mention(self, name: str, description: str) -> None:
        """List `/name` in `/help` though an interceptor ahead of this one runs it (e.g.
        compaction's `/compact`): what users can type is listed in one place."""
        self._commands.setdefault(name, _Binding(description, None))

    def commands(self) -> dict[str, str]:
        """Name -> description of every bound command."""
        return {name: b.description for name, b in self._commands.items()}

    async def intercept(self, event: IngressEvent, stream: Stream) -> InterceptResult:
        """Consume and run slash commands; pass every other event through unchanged."""
        if not isinstance(event, UserMessageEvent):
            return InterceptResult(event)
        parsed = parse_command(event.content)
        if parsed is None:
            return InterceptResult(event)
        name, raw_input = parsed
        binding = self._commands.get(name)
        if binding is None or binding.handler is None:
            return InterceptResult(
                None,
                [
                    Notice(
                        f"Unknown command: /{name}. Type /help for available commands.",
                        Severity.INFO,
                    )
                ],
            )
        try:
            result = await binding.handler(Command(name, raw_input, event, stream))
        except CommandError as exc:
            notice = exc.notice if exc.notice and exc.notice.content else None
            return InterceptResult(None, [notice or Notice(str(exc), Severity.ERROR)])
        except Exception as exc:
            return InterceptResult(None, [Notice(f"/{name} failed: {exc}", Severity.ERROR)])
        notices = [result.notice] if result.notice is not None and result.notice.content else []
        return InterceptResult(result.replace, notices)

    async def _help(self, command: Command) -> CommandResult:
        # Plain text in columns: conduits show notices as written (a terminal shows no
        # Markdown), so backticks and bullets would be printed as they are.
        width = max(len(name) for name in self._commands) + 1
        lines = ["Available commands:"]
        for name in sorted(self._commands):
            lines.append(f"  {'/' + name:<{width}}  {self._commands[name].description}")
        return CommandResult(notice=Notice("\n".join(lines), Severity.INFO))


def _preview(turn: Turn, width: int = 60) -> str:
    text = " ".join(
        getattr(artifact, "content", "")
        for artifact in turn.artifacts
        if hasattr(artifact, "content")
    ).strip()
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


async def _model(command: Command) -> CommandResult:
    """Show the model of this thread, or choose another one.

    A processor says which model it uses by default with a `default_model` attribute;
    `default_model = None` (echo) means it has no model to switch, and saying it
    switched would be a lie.
    """
    name = command.input.strip()
    processor = command.stream.processor
    default = getattr(processor, "default_model", "the processor's default")
    if default is None:
        describe = getattr(processor, "describe", None)
        what = str(describe()) if callable(describe) else type(processor).__name__
        return CommandResult(
            notice=Notice(
                f"{what} answers here and has no models to choose from; to chat with a model, "
                "configure one (OPENAI_API_KEY or ORE_OPENAI_BASE_URL) and restart ore.",
                Severity.WARN if name else Severity.INFO,
            )
        )
    current = command.stream.spec().name or str(default)
    if not name:
        return CommandResult(
            notice=Notice(f"Current model: {current}. Usage: /model <name>", Severity.INFO)
        )
    await command.stream.set_metadata(KEY_MODEL_NAME, name)
    return CommandResult(notice=Notice(f"Model set to {name} (was {current}).", Severity.SUCCESS))


async def _undo(command: Command) -> CommandResult:
    thread = command.stream.state()
    before = thread.current_tip
    after = thread.undo()
    if after == before:
        return CommandResult(notice=Notice("Nothing to undo.", Severity.INFO))
    return CommandResult(
        notice=Notice("Undid the last exchange (it is kept as a branch).", Severity.SUCCESS)
    )


async def _fork(command: Command) -> CommandResult:
    turn_id = command.input.strip()
    if not turn_id:
        raise CommandError(
            "Usage: /fork <turn id>", Notice("Usage: /fork <turn id>", Severity.INFO)
        )
    thread = command.stream.state()
    if thread.get_turn(turn_id) is None:
        raise CommandError(f"No turn {turn_id} in this thread. Use /branches to list them.")
    thread.fork(turn_id)
    return CommandResult(
        notice=Notice(f"Forked at {turn_id}: your next message starts a branch.", Severity.SUCCESS)
    )


async def _branches(command: Command) -> CommandResult:
    thread = command.stream.state()
    leaves = thread.branches()
    if not leaves:
        return CommandResult(notice=Notice("No turns yet.", Severity.INFO))
    tip = thread.current_tip
    on_path = {turn.id for turn in thread.turns()}
    lines = [f"Branches ({len(leaves)}):"]
    for leaf in leaves:
        mark = "*" if leaf.id == tip or leaf.id in on_path else "-"
        lines.append(f"{mark} {leaf.id} [{leaf.role}] {_preview(leaf)}")
    return CommandResult(notice=Notice("\n".join(lines), Severity.INFO))


async def _meta(command: Command) -> CommandResult:
    parts = command.input.strip().split(None, 1)
    stream = command.stream
    if not parts:
        items = sorted(stream.all_metadata().items())
        body = "\n".join(f"{k} = {v}" for k, v in items) if items else "(no metadata)"
        return CommandResult(notice=Notice(body, Severity.INFO))
    if len(parts) == 1:
        value = stream.get_metadata(parts[0])
        text = f"{parts[0]} = {value}" if value is not None else f"{parts[0]} is not set"
        return CommandResult(notice=Notice(text, Severity.INFO))
    await stream.set_metadata(parts[0], parts[1])
    return CommandResult(notice=Notice(f"{parts[0]} = {parts[1]}", Severity.SUCCESS))


async def _new(command: Command) -> CommandResult:
    new_thread = command.stream.new_thread
    if new_thread is None:
        raise CommandError("/new needs a manager (this stream was created standalone)")
    thread_id = await new_thread()
    await command.stream.emit(
        SessionSwitchEvent(id=new_event_id(), session_id=thread_id, context=command.event.context)
    )
    return CommandResult(notice=Notice(f"Started a new thread {thread_id}.", Severity.SUCCESS))


def default_commands() -> SlashCommands:
    """The built-in commands: help, model, undo, fork, branches, meta, new."""
    commands = SlashCommands()
    commands.bind("model", "Choose the model for the next turns: /model NAME", _model)
    commands.bind("undo", "Remove the last exchange from the conversation", _undo)
    commands.bind("fork", "Continue from an earlier turn: /fork TURN_ID", _fork)
    commands.bind("branches", "List the branches of this thread", _branches)
    commands.bind("meta", "Show or set thread metadata: /meta [KEY [VALUE]]", _meta)
    commands.bind("new", "Start a new thread", _new)
    return commands
