"""Log set-up: JSON lines off a terminal, console on one, bound context on every line."""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Iterator

import pytest
import structlog

from ore_core import ConfigError
from ore_core.logging import configure_logging


class Terminal(io.StringIO):
    """A text stream that says it is a terminal, as a real TTY would."""

    def isatty(self) -> bool:
        return True


@pytest.fixture(autouse=True)
def _reset_structlog() -> Iterator[None]:
    yield
    structlog.contextvars.clear_contextvars()
    structlog.reset_defaults()


def lines(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_json_lines_when_the_stream_is_not_a_terminal() -> None:
    stream = io.StringIO()
    configure_logging("info", "auto", stream=stream)
    structlog.get_logger().info("stream.started", workers=2)
    (line,) = lines(stream)
    assert (line["event"], line["level"], line["workers"]) == ("stream.started", "info", 2)
    assert str(line["timestamp"]).endswith("Z")


def test_bound_context_appears_on_every_line() -> None:
    stream = io.StringIO()
    configure_logging("info", "json", stream=stream)
    structlog.contextvars.bind_contextvars(thread_id="t1", event_id="e1", conduit="slack")
    log = structlog.get_logger()
    log.info("turn.started")
    log.warning("turn.slow", seconds=3)
    context = {"thread_id": "t1", "event_id": "e1", "conduit": "slack"}
    assert [context.items() <= line.items() for line in lines(stream)] == [True, True]


def test_console_format_on_a_terminal() -> None:
    stream = Terminal()
    configure_logging("info", "auto", stream=stream)
    structlog.get_logger().info("stream.started", workers=2)
    output = stream.getvalue()
    assert "stream.started" in output
    assert not output.lstrip().startswith("{")


def test_json_format_can_be_forced_on_a_terminal() -> None:
    stream = Terminal()
    configure_logging("info", "json", stream=stream)
    structlog.get_logger().info("stream.started")
    assert lines(stream)[0]["event"] == "stream.started"


def test_lines_below_the_level_are_dropped() -> None:
    stream = io.StringIO()
    configure_logging("warning", "json", stream=stream)
    log = structlog.get_logger()
    log.info("quiet")
    log.warning("loud")
    assert [line["event"] for line in lines(stream)] == ["loud"]


def test_exceptions_are_structured_in_json() -> None:
    stream = io.StringIO()
    configure_logging("info", "json", stream=stream)
    try:
        raise KeyError("thread-9")
    except KeyError:
        structlog.get_logger().exception("turn.failed")
    (line,) = lines(stream)
    assert line["exception"][0]["exc_type"] == "KeyError"  # type: ignore[index]


def test_configuring_again_replaces_the_first_setup_for_existing_loggers() -> None:
    first, second = io.StringIO(), io.StringIO()
    configure_logging("info", "json", stream=first)
    log = structlog.get_logger()
    log.info("one")
    configure_logging("info", "json", stream=second)
    log.info("two")
    assert [line["event"] for line in lines(first)] == ["one"]
    assert [line["event"] for line in lines(second)] == ["two"]


def test_default_stream_is_stderr_at_the_time_of_writing(monkeypatch: pytest.MonkeyPatch) -> None:
    configure_logging("info", "json")
    later = io.StringIO()
    monkeypatch.setattr(sys, "stderr", later)
    structlog.get_logger().info("redirected")
    assert lines(later)[0]["event"] == "redirected"


def test_unknown_level_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="unknown log level 'loud'"):
        configure_logging("loud")


SECRET = "-".join(["s3cret", "in", "a", "local"])  # never spelled out in source lines


def _fail_with_a_secret_in_scope(password: str) -> None:
    assert password  # a frame local a traceback could show
    raise RuntimeError("boom")


@pytest.mark.parametrize("fmt", ["json", "console"])
def test_a_logged_traceback_shows_no_local_variables(fmt: str) -> None:
    """Frame locals hold credentials and users' text: a traceback in the log never
    carries them (structlog shows them by default)."""
    stream = io.StringIO()
    configure_logging("info", fmt, stream=stream)
    try:
        _fail_with_a_secret_in_scope(SECRET)
    except RuntimeError:
        structlog.get_logger().exception("it failed")
    out = stream.getvalue()
    assert "boom" in out
    assert "_fail_with_a_secret_in_scope" in out
    assert SECRET not in out
