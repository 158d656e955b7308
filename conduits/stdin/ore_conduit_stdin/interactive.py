"""The interactive chat: a prompt with line editing and history, Ctrl-C and Ctrl-D.

At the prompt, Ctrl-C clears the line and a second Ctrl-C in a row leaves, as does
Ctrl-D. While a reply is being written, Ctrl-C asks the core to interrupt it (the
terminal is not in raw mode then, so Ctrl-C arrives as SIGINT). Slash commands go to
the core unchanged; its interceptors answer them.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import signal
import struct
import termios
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TextIO

from prompt_toolkit import PromptSession
from prompt_toolkit.application import run_in_terminal
from rich.console import Console
from rich.text import Text

from ore_conduit_stdin.files import ATTACH, attach
from ore_conduit_stdin.session import ChatSession
from ore_conduit_stdin.state import LastThread
from ore_conduit_stdin.terminal import TerminalView
from ore_core.artifacts import Attachment

__all__ = ["PROMPT", "chat", "quiet_terminal", "sigint_calls"]

PROMPT = "you> "
_LEAVE_HINT = "(Ctrl-C again or Ctrl-D to leave)"
_TYPED_AHEAD = "(what you typed during the reply was not sent: type it at the prompt)"


@contextmanager
def sigint_calls(callback: Callable[[], None]) -> Iterator[None]:
    """While the block runs, SIGINT (Ctrl-C) calls `callback` instead of stopping the program.

    The previous handler is put back afterwards. Off the main thread (where asyncio
    cannot handle signals) the block runs without it.
    """
    loop = asyncio.get_running_loop()
    previous = signal.getsignal(signal.SIGINT)
    try:
        loop.add_signal_handler(signal.SIGINT, callback)
        installed = True
    except (NotImplementedError, RuntimeError):
        installed = False
    try:
        yield
    finally:
        if installed:
            loop.remove_signal_handler(signal.SIGINT)
            if previous is not None:
                signal.signal(signal.SIGINT, previous)


@contextmanager
def quiet_terminal(stdin: TextIO | None) -> Iterator[list[int]]:
    """While a reply is written: keystrokes are not echoed, and are dropped at the end.

    Echoed keys (and the `^C` of an interrupt) would land inside the live reply area
    and break its redrawing, which then leaves a second copy of the reply behind; text
    typed ahead would be sent, unseen, at the next prompt. The list yielded receives
    the number of bytes dropped (nothing happens when stdin is not a terminal).
    """
    dropped: list[int] = []
    fd = stdin.fileno() if stdin is not None and stdin.isatty() else None
    if fd is None:
        yield dropped
        return
    saved = termios.tcgetattr(fd)
    quiet = list(saved)
    quiet[3] &= ~(termios.ECHO | termios.ECHOCTL)
    termios.tcsetattr(fd, termios.TCSANOW, quiet)
    try:
        yield dropped
    finally:
        pending = struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0]
        termios.tcflush(fd, termios.TCIFLUSH)
        termios.tcsetattr(fd, termios.TCSANOW, saved)
        if pending:
            dropped.append(pending)


async def chat(
    session: ChatSession,
    prompt: PromptSession[str],
    view: TerminalView,
    *,
    err: Console,
    last_thread: LastThread,
    stdin: TextIO | None = None,
) -> None:
    """Prompt, send, show the reply; until Ctrl-D or two Ctrl-C in a row at the prompt."""
    interrupts = 0
    while True:
        try:
            line = await _prompt_watching(session, prompt, view)
        except KeyboardInterrupt:
            interrupts += 1
            if interrupts >= 2:
                return
            err.print(Text(_LEAVE_HINT, style="dim"))
            continue
        except EOFError:
            return
        interrupts = 0
        if not line.strip():
            continue
        attachments: tuple[Attachment, ...] = ()
        if line.split(maxsplit=1)[0] == ATTACH:
            line, attachments = await attach(session.client, line, err)
            if not line and not attachments:
                continue
        with sigint_calls(session.interrupt), quiet_terminal(stdin) as dropped:
            result = await session.turn(line, view, attachments)
        if dropped:
            err.print(Text(_TYPED_AHEAD, style="dim"))
        if result.switched_to is not None:
            last_thread.save(session.thread_id)


async def _prompt_watching(
    session: ChatSession, prompt: PromptSession[str], view: TerminalView
) -> str:
    """The next line typed; meanwhile what other endpoints of a linked thread say (and
    its answers) is printed above the prompt, the line being typed kept as it is."""

    async def above_prompt(show: Callable[[], None]) -> None:
        await run_in_terminal(show)

    watcher = asyncio.create_task(session.watch(view, above_prompt), name="chat-watch")
    try:
        return await prompt.prompt_async(PROMPT)
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
