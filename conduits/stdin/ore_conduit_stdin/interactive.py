"""The interactive chat: a prompt with line editing and history, Ctrl-C and Ctrl-D.

At the prompt, Ctrl-C clears the line and a second Ctrl-C in a row leaves, as does
Ctrl-D. While a reply is being written, Ctrl-C asks the core to interrupt it (the
terminal is not in raw mode then, so Ctrl-C arrives as SIGINT). Slash commands go to
the core unchanged; its interceptors answer them.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from prompt_toolkit import PromptSession
from rich.console import Console
from rich.text import Text

from ore_conduit_stdin.session import ChatSession
from ore_conduit_stdin.state import LastThread
from ore_conduit_stdin.terminal import TerminalView

__all__ = ["PROMPT", "chat", "sigint_calls"]

PROMPT = "you> "
_LEAVE_HINT = "(Ctrl-C again or Ctrl-D to leave)"


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


async def chat(
    session: ChatSession,
    prompt: PromptSession[str],
    view: TerminalView,
    *,
    err: Console,
    last_thread: LastThread,
) -> None:
    """Prompt, send, show the reply; until Ctrl-D or two Ctrl-C in a row at the prompt."""
    interrupts = 0
    while True:
        try:
            line = await prompt.prompt_async(PROMPT)
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
        with sigint_calls(session.interrupt):
            result = await session.turn(line, view)
        if result.switched_to is not None:
            last_thread.save(session.thread_id)
