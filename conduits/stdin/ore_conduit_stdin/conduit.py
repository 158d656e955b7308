"""The stdin conduit: a terminal chat with ore, or one reply per piped line.

With a terminal on stdin and stdout it is interactive (`interactive.chat`);
otherwise it answers the input line by line as plain text (`pipe.answer_lines`).
Either way it returns when the input ends (Ctrl-D, the end of the pipe), so
`ore chat` and `ore conduit stdin` exit then.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import ClassVar, TextIO

from ore_conduit_stdin.config import StdinConfig
from ore_conduit_stdin.pipe import (
    PlainView,
    StdinError,
    answer_lines,
    first_line,
    read_all,
    read_lines,
)
from ore_conduit_stdin.session import ChatSession
from ore_conduit_stdin.state import LastThread, history_file
from ore_core.conduit import (
    ApiError,
    Capabilities,
    Conduit,
    ConduitClient,
    ConduitConfig,
    ThreadInfo,
)
from ore_core.endpoint import KeyForm
from ore_core.errors import ThreadNotFound
from ore_core.id_prefix import AmbiguousThreadId, resolve_on_core

__all__ = ["StdinConduit", "open_thread"]


async def _chain(first: str, rest: AsyncIterator[str]) -> AsyncIterator[str]:
    yield first
    async for line in rest:
        yield line


async def _single(message: str) -> AsyncIterator[str]:
    yield message


_NOT_FOUND = 404
_EXISTS = 409
_NOTHING_TO_CONTINUE = "-c: no thread to continue yet: start one with `ore chat` or `ore chat TEXT`"


async def open_thread(
    client: ConduitClient, config: StdinConfig, mode: str, remembered: str | None = None
) -> tuple[str, ThreadInfo | None]:
    """The thread to talk in, and its description when it existed already.

    `config.thread` (an id or a unique prefix of one) is continued; an unknown one is
    an error unless `config.new`, which creates it. Otherwise `remembered` is resumed
    if it still exists, unless `config.new`; otherwise a new thread starts. A new
    thread records `stdin.mode` (`interactive` or `pipe`) and `stdin.user`.
    """
    metadata = {"stdin.mode": mode, **({"stdin.user": config.user} if config.user else {})}
    if config.thread is not None:
        try:
            found = await resolve_on_core(client, config.thread)
        except ThreadNotFound as exc:
            if not config.new or isinstance(exc, AmbiguousThreadId):
                hint = "" if isinstance(exc, AmbiguousThreadId) else ", or add --new to start it"
                raise StdinError(f"{exc}{hint}") from None
        else:
            return found, await client.get_thread(found)
        try:
            await client.create_thread(config.thread, metadata)
        except ApiError as exc:
            if exc.status != _EXISTS:  # another chat created it a moment ago
                raise
        return config.thread, None
    if config.resume and remembered is None:
        raise StdinError(_NOTHING_TO_CONTINUE)
    if remembered is not None and not config.new:
        try:
            return remembered, await client.get_thread(remembered)
        except ApiError as exc:
            if exc.status != _NOT_FOUND:
                raise
            if config.resume:
                raise StdinError(f"-c: thread {remembered}, used last, no longer exists") from None
    return await client.create_thread(metadata=metadata), None


async def _pipe_thread(client: ConduitClient, config: StdinConfig) -> str:
    """The thread of piped input or a PROMPT: a new one, or with `resume` (-c) the one
    `ore chat` used last; remembered either way, so the next `-c` continues it."""
    last_thread = LastThread(config.state_dir)
    remembered = last_thread.load() if config.resume else None
    thread_id, _ = await open_thread(client, config, "pipe", remembered)
    last_thread.save(thread_id)
    return thread_id


class StdinConduit(Conduit):
    """Chat with ore in a terminal, or pipe lines through it (`echo hi | ore chat`).

    The streams default to the process's own; tests pass others.
    """

    name: ClassVar[str] = "stdin"
    description: ClassVar[str] = "Terminal chat: streamed Markdown replies; piped input works too"
    config_model: ClassVar[type[ConduitConfig]] = StdinConfig
    conversation_key: ClassVar[str] = "id"
    key_form: ClassVar[KeyForm | None] = KeyForm("THREAD", "ab258e56")
    # A terminal shows text as it comes: deltas every 30 ms, not the core's 100 ms.
    capabilities: ClassVar[Capabilities] = Capabilities(
        streaming=True, markup="markdown", delta_interval=0.03, file_max_bytes=None
    )

    def __init__(
        self,
        stdin: TextIO | None = None,
        stdout: TextIO | None = None,
        stderr: TextIO | None = None,
    ) -> None:
        self._stdin = stdin
        self._stdout = stdout
        self._stderr = stderr

    async def run(self, client: ConduitClient, config: ConduitConfig) -> None:
        """Talk until the input ends; raise StdinError when a piped turn fails."""
        if not isinstance(config, StdinConfig):
            raise TypeError(f"the stdin conduit needs a StdinConfig, not {type(config).__name__}")
        stdin = self._stdin if self._stdin is not None else sys.stdin
        stdout = self._stdout if self._stdout is not None else sys.stdout
        stderr = self._stderr if self._stderr is not None else sys.stderr
        if config.prompt is not None:
            await self._one_shot(client, config, stdin, stdout, stderr)
            return
        if stdin is not None and stdin.isatty() and stdout.isatty():
            await self._interactive(client, config, stdin, stdout, stderr)
            return
        async with aclosing(read_lines(stdin)) as lines:
            first = await first_line(lines)
            if first is None:
                return  # an empty pipe: nothing to say, so no thread either
            thread_id = await _pipe_thread(client, config)
            async with ChatSession(
                client, thread_id, user=config.user, files_dir=config.state_dir / "files"
            ) as session:
                await answer_lines(session, _chain(first, lines), PlainView(stdout, stderr))

    async def _one_shot(
        self,
        client: ConduitClient,
        config: StdinConfig,
        stdin: TextIO | None,
        stdout: TextIO,
        stderr: TextIO,
    ) -> None:
        """`ore chat "prompt"`: one message (piped input appended), one answer, done."""
        piped = await read_all(stdin)
        message = "\n\n".join(part for part in (config.prompt or "", piped.strip("\n")) if part)
        if not message.strip():
            raise StdinError("nothing to send: the prompt and the input are empty")
        thread_id = await _pipe_thread(client, config)
        async with ChatSession(
            client, thread_id, user=config.user, files_dir=config.state_dir / "files"
        ) as session:
            await answer_lines(session, _single(message), PlainView(stdout, stderr))

    async def _interactive(
        self,
        client: ConduitClient,
        settings: StdinConfig,
        stdin: TextIO,
        stdout: TextIO,
        stderr: TextIO,
    ) -> None:
        # The terminal's libraries load here: every `ore` command (`ore --help` too)
        # imports this module to register the conduit, and pipes never need them.
        from prompt_toolkit import PromptSession
        from prompt_toolkit.history import FileHistory
        from prompt_toolkit.input import create_input
        from prompt_toolkit.output import create_output
        from rich.console import Console
        from rich.text import Text

        from ore_conduit_stdin.interactive import chat
        from ore_conduit_stdin.terminal import TerminalView

        err = Console(file=stderr, highlight=False)
        last_thread = LastThread(settings.state_dir)
        thread_id, existing = await open_thread(client, settings, "interactive", last_thread.load())
        last_thread.save(thread_id)
        how = "new thread" if existing is None else f"resumed, {existing.turns} turns"
        err.print(
            Text(
                f"Thread {thread_id} ({how}). Ctrl-C interrupts a reply, Ctrl-D leaves, "
                "/help lists commands, /new starts a new thread.",
                style="dim",
            )
        )
        async with ChatSession(
            client, thread_id, user=settings.user, files_dir=settings.state_dir / "files"
        ) as session:
            prompt: PromptSession[str] = PromptSession(
                history=FileHistory(str(history_file(settings.state_dir))),
                input=create_input(stdin),
                output=create_output(stdout),
            )
            view = TerminalView(
                Console(file=stdout, highlight=False), err, markdown=settings.markdown
            )
            await chat(session, prompt, view, err=err, last_thread=last_thread, stdin=stdin)
