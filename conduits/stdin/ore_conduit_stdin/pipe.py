"""Piped input: every line is one turn, every reply printed as plain text, in order.

`echo hello | ore chat` prints the reply and exits 0. The first turn that fails or is
cancelled stops the run with `StdinError` (one line, so the exit status says it and
the reason fits a log line). Notices go to stderr as `Severity: text`.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncGenerator, AsyncIterator
from typing import TextIO

from ore_conduit_stdin.session import ChatSession
from ore_core import ArtifactEvent, NoticeEvent, OreError, OutputEvent, Text

__all__ = ["PlainView", "StdinError", "answer_lines", "first_line", "read_all", "read_lines"]


class StdinError(OreError):
    """A piped turn failed or reading the input failed; the message is one line."""


class PlainView:
    """Complete reply texts on `out` (no deltas, no colour), notices on `err`."""

    def __init__(self, out: TextIO, err: TextIO) -> None:
        self._out = out
        self._err = err

    def begin(self) -> None:
        """Nothing to show until a text is complete."""

    def show(self, event: OutputEvent) -> None:
        """Print complete texts and notices; everything else is for terminals."""
        if isinstance(event, ArtifactEvent) and isinstance(event.artifact, Text):
            self._out.write(event.artifact.content + "\n")
            self._out.flush()
        elif isinstance(event, NoticeEvent):
            self._err.write(f"{event.severity.label}: {event.content}\n")
            self._err.flush()

    def end(self) -> None:
        """Nothing left to print."""


async def read_lines(stream: TextIO | None) -> AsyncGenerator[str, None]:
    """The lines of `stream` without their line endings, read without blocking the loop.

    A daemon thread reads, because no portable way reads a pipe, a file and a terminal
    alike asynchronously; a daemon never delays the end of the process.
    """
    if stream is None:  # started with stdin closed
        return
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[str | BaseException | None] = asyncio.Queue()

    def deliver(item: str | BaseException | None) -> None:
        try:
            loop.call_soon_threadsafe(queue.put_nowait, item)
        except RuntimeError:  # the loop is gone: nobody reads any more
            pass

    def pump() -> None:
        try:
            for line in stream:
                deliver(line.rstrip("\r\n"))
        except (OSError, ValueError) as exc:  # a broken pipe, undecodable bytes
            deliver(exc)
        deliver(None)

    threading.Thread(target=pump, name="ore-stdin-reader", daemon=True).start()
    while (item := await queue.get()) is not None:
        if isinstance(item, BaseException):
            raise StdinError(f"cannot read the input: {item}")
        yield item


async def answer_lines(session: ChatSession, lines: AsyncIterator[str], view: PlainView) -> None:
    """One turn per non-blank line; raise StdinError at the first failed or cancelled turn.

    A line an interceptor drops does not stop the others, but once the input ends the
    run fails (exit status 1) saying how many were dropped: a script must not mistake
    a refused line for an answered one.
    """
    sent = dropped = 0
    async for line in lines:
        if not line.strip():
            continue
        result = await session.turn(line, view)
        sent += 1
        if result.error is not None:
            reason = _one_line(result.error)
            raise StdinError(f"turn failed on thread {session.thread_id}: {reason}")
        if result.cancelled:
            raise StdinError(f"turn on thread {session.thread_id} was cancelled")
        if result.dropped:
            dropped += 1
    if dropped:
        raise StdinError(
            f"{dropped} of {sent} message(s) were dropped by an interceptor on thread "
            f"{session.thread_id} (the notices above say why)"
        )


async def first_line(lines: AsyncIterator[str]) -> str | None:
    """The first non-blank line (None when the input has none): no thread for nothing."""
    async for line in lines:
        if line.strip():
            return line
    return None


async def read_all(stream: TextIO | None) -> str:
    """Everything on `stream` (a pipe or a file), read off the event loop."""
    if stream is None or stream.isatty():
        return ""
    try:
        return await asyncio.to_thread(stream.read)
    except (OSError, ValueError) as exc:
        raise StdinError(f"cannot read the input: {exc}") from None


def _one_line(text: str) -> str:
    return " ".join(text.split())
