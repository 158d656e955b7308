"""How a turn looks on a terminal: a spinner, then the reply streaming as Markdown.

While the turn runs, a `rich.live.Live` area re-renders the transcript so far
`REFRESH_PER_SECOND` times a second (only its last screenful, so the newest text stays
in view and redrawing never scrolls); when it ends the area is cleared and the
whole reply printed once, so the scrollback holds it exactly once. Notices and errors
go to stderr above the live area, as plain text (they are often usage lines and
listings, which Markdown would mangle).
"""

from __future__ import annotations

from collections.abc import Callable

from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.live import Live
from rich.markdown import Markdown
from rich.segment import Segment
from rich.spinner import Spinner
from rich.text import Text

from ore_conduit_stdin.transcript import Block, Transcript
from ore_core import (
    ActivityEvent,
    ArtifactEvent,
    ErrorEvent,
    LifecycleEvent,
    NoticeEvent,
    OutputEvent,
    Severity,
)

__all__ = ["REFRESH_PER_SECOND", "TerminalView", "notice_style"]

REFRESH_PER_SECOND = 12
_WAITING = "thinking…"
_TOOL_RESULT_LINES = 6
_NOTICE_STYLES = {
    Severity.SUCCESS: "green",
    Severity.INFO: "cyan",
    Severity.WARN: "yellow",
    Severity.ERROR: "bold red",
}


def notice_style(severity: Severity) -> str:
    """The colour of a notice of `severity` (unknown severities look like Info)."""
    return _NOTICE_STYLES.get(severity, _NOTICE_STYLES[Severity.INFO])


class _Tail:
    """The last screenful (one line to spare) of what `build` returns, built per frame.

    Rebuilding at each refresh rather than at each delta bounds the Markdown parsing
    to `REFRESH_PER_SECOND` passes a second, however fast the deltas come.
    """

    def __init__(self, build: Callable[[], RenderableType]) -> None:
        self.build = build

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        lines = console.render_lines(self.build(), options, pad=False)
        for line in lines[-max(options.size.height - 1, 1) :]:
            yield from line
            yield Segment.line()


class TerminalView:
    """Renders turns on a terminal: replies on `out`, notices and errors on `err`.

    Call it from one thread (the event loop); rich's refresh thread only reads the
    transcript, whose blocks change by whole-string replacement.
    """

    def __init__(self, out: Console, err: Console, *, markdown: bool = True) -> None:
        self._out = out
        self._err = err
        self._markdown = markdown
        self._transcript = Transcript()
        self._spinner = Spinner("dots", Text(_WAITING, style="dim"))
        self._live: Live | None = None
        self._cancelled = False

    def begin(self) -> None:
        """Show the spinner until something streams."""
        self._transcript = Transcript()
        self._spinner.update(text=Text(_WAITING, style="dim"))
        self._cancelled = False
        self._start_live()

    def show(self, event: OutputEvent) -> None:
        """Add `event` to the live area, or print it above (notices, errors)."""
        if isinstance(event, ArtifactEvent):
            self._transcript.add(event.artifact)  # the next frame shows it
        elif isinstance(event, NoticeEvent):
            # As written: Markdown would eat `<turn id>` and join the lines of `/meta`.
            self._aside(Text(event.content, style=notice_style(event.severity)))
        elif isinstance(event, ErrorEvent):
            self._aside(Text(f"error: {event.message}", style="bold red"))
        elif isinstance(event, LifecycleEvent) and event.phase == "cancelled":
            self._cancelled = True
        elif isinstance(event, ActivityEvent):
            label = event.description if event.active and event.description else _WAITING
            self._spinner.update(text=Text(label, style="dim"))

    def end(self) -> None:
        """Clear the live area and print the finished reply once."""
        live, self._live = self._live, None
        if live is not None:
            live.stop()
        if self._transcript.blocks:
            self._out.print(Group(*self._blocks()))
        if self._cancelled:
            self._err.print(Text("(interrupted)", style="dim"))

    def answer(self, text: str) -> None:
        """Another endpoint's finished answer, printed whole (no turn of ours is shown)."""
        self._out.print(self._text(text))

    def _start_live(self) -> None:
        self._live = Live(
            _Tail(self._renderable),
            console=self._out,
            transient=True,
            refresh_per_second=REFRESH_PER_SECOND,
            redirect_stdout=False,
            redirect_stderr=False,
        )
        self._live.start()

    def _aside(self, renderable: RenderableType) -> None:
        """Print on stderr without tearing the live area (it is redrawn below).

        A new Live, not a restarted one: a restarted Live would first erase as many
        lines as it last drew, which are now the printed ones.
        """
        live = self._live
        if live is not None:
            live.stop()
        self._err.print(renderable)
        if live is not None:
            self._start_live()

    def _renderable(self) -> RenderableType:
        parts = self._blocks()
        if not self._transcript.streaming:
            parts.append(self._spinner)
        return Group(*parts)

    def _blocks(self) -> list[RenderableType]:
        return [self._block(block) for block in self._transcript.blocks]

    def _text(self, content: str, style: str = "") -> RenderableType:
        """Markdown (what models and slash commands write), or the text as it is."""
        return Markdown(content, style=style) if self._markdown else Text(content, style=style)

    def _block(self, block: Block) -> RenderableType:
        if block.kind == "text":
            return self._text(block.content)
        if block.kind == "reasoning":
            return Text(block.content, style="dim italic")
        if block.kind == "tool_call":
            return Text(f"⚙ {block.content}", style="dim cyan")
        lines = block.content.splitlines() or [""]
        shown = "\n".join(lines[:_TOOL_RESULT_LINES])
        if len(lines) > _TOOL_RESULT_LINES:
            shown += f"\n… {len(lines) - _TOOL_RESULT_LINES} more lines"
        return Text(f"↳ {shown}", style="red" if block.error else "dim")
