"""TerminalView: the finished reply once, as Markdown; notices and errors on stderr."""

from __future__ import annotations

import io

from rich.console import Console

from ore_conduit_stdin.terminal import TerminalView, notice_style
from ore_core import (
    ArtifactEvent,
    ErrorEvent,
    LifecycleEvent,
    NoticeEvent,
    Severity,
    Text,
    TextDelta,
)


class Screens:
    """A TerminalView writing to two in-memory consoles."""

    def __init__(self, *, markdown: bool = True) -> None:
        self.out = io.StringIO()
        self.err = io.StringIO()
        self.view = TerminalView(
            Console(file=self.out, width=80), Console(file=self.err, width=80), markdown=markdown
        )


def test_the_finished_reply_is_printed_once_as_markdown() -> None:
    screens = Screens()
    screens.view.begin()
    screens.view.show(ArtifactEvent(artifact=TextDelta("Hello ")))
    screens.view.show(ArtifactEvent(artifact=Text("Hello **world**")))
    screens.view.end()
    assert screens.out.getvalue().count("Hello world") == 1
    assert "**" not in screens.out.getvalue()


def test_without_markdown_the_reply_is_printed_as_written() -> None:
    screens = Screens(markdown=False)
    screens.view.begin()
    screens.view.show(ArtifactEvent(artifact=Text("Hello **world**")))
    screens.view.end()
    assert screens.out.getvalue() == "Hello **world**\n"


def test_notices_and_errors_go_to_stderr() -> None:
    screens = Screens()
    screens.view.begin()
    screens.view.show(NoticeEvent(content="Model set", severity=Severity.SUCCESS))
    screens.view.show(ErrorEvent(message="model unavailable"))
    screens.view.end()
    lines = [line.rstrip() for line in screens.err.getvalue().splitlines()]
    assert lines == ["Model set", "error: model unavailable"]
    assert screens.out.getvalue() == ""


def test_a_cancelled_turn_says_it_was_interrupted() -> None:
    screens = Screens()
    screens.view.begin()
    screens.view.show(ArtifactEvent(artifact=TextDelta("partial")))
    screens.view.show(LifecycleEvent(phase="cancelled"))
    screens.view.end()
    assert screens.out.getvalue().strip() == "partial"
    assert screens.err.getvalue() == "(interrupted)\n"


def test_notices_are_printed_as_written_not_as_markdown() -> None:
    screens = Screens()
    screens.view.show(NoticeEvent(content="Usage: /fork <turn id>"))
    screens.view.show(NoticeEvent(content="Metadata:\na = 1\nb = 2"))
    assert screens.err.getvalue().splitlines() == [
        "Usage: /fork <turn id>",
        "Metadata:",
        "a = 1",
        "b = 2",
    ]


def test_each_severity_has_its_own_colour() -> None:
    styles = {notice_style(severity) for severity in Severity}
    assert len(styles) == len(Severity)
