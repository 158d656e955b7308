"""Log set-up: structlog, human-readable on a terminal and JSON lines elsewhere.

Values bound with `structlog.contextvars.bind_contextvars` (`thread_id`, `event_id`,
`conduit`, ...) appear on every line logged from the same task, so a line from deep
inside a turn still says which conversation it belongs to. Logs go to stderr: stdout
belongs to command output (`ore plugins --json`, piped chat replies).
"""

from __future__ import annotations

import logging
import sys
from typing import Any, TextIO

import orjson
import structlog
from structlog.typing import Processor

from ore_core.config import ConfigError, LogFormat

__all__ = ["configure_logging"]

_LEVELS = logging.getLevelNamesMapping()


def _orjson_text(value: Any, **options: Any) -> str:
    # PrintLogger writes text, so one renderer serves real streams and StringIO alike.
    return orjson.dumps(value, **options).decode()


def _stderr_logger(*args: Any) -> structlog.PrintLogger:
    return structlog.PrintLogger(sys.stderr)


def configure_logging(
    level: str | int = "info", fmt: LogFormat = "auto", *, stream: TextIO | None = None
) -> None:
    """Send structlog output at `level` and above to `stream`, by default stderr.

    `fmt="auto"` picks the console renderer when the stream is a terminal and JSON
    lines otherwise. Without `stream`, each line goes to whatever `sys.stderr` is when
    it is written, so a later redirection (a test runner's) is followed, never a
    closed file. Calling it again replaces the previous set-up; loggers obtained
    earlier with `structlog.get_logger()` follow the new one (nothing is cached on
    first use, which also keeps `structlog.testing.capture_logs` working).
    """
    numeric = level if isinstance(level, int) else _LEVELS.get(level.upper())
    if numeric is None:
        raise ConfigError(
            f"unknown log level {level!r}; use debug, info, warning, error or critical"
        )
    tty = (sys.stderr if stream is None else stream).isatty()
    renderer: Processor
    # Tracebacks without the frames' local variables: those hold credentials, API keys
    # and users' messages, and a log is read (and shipped) by more people than a
    # conversation is. structlog shows them by default.
    if fmt == "console" or (fmt == "auto" and tty):
        formatter: Any = (
            structlog.dev.RichTracebackFormatter(show_locals=False)
            if getattr(structlog.dev, "rich", None) is not None
            else structlog.dev.plain_traceback
        )
        renderer = structlog.dev.ConsoleRenderer(colors=tty, exception_formatter=formatter)
        exceptions: list[Processor] = []
    else:
        renderer = structlog.processors.JSONRenderer(serializer=_orjson_text)
        exceptions = [
            structlog.processors.ExceptionRenderer(
                structlog.tracebacks.ExceptionDictTransformer(show_locals=False)
            )
        ]
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.StackInfoRenderer(),
            *exceptions,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=_stderr_logger if stream is None else structlog.PrintLoggerFactory(stream),
        cache_logger_on_first_use=False,
    )
