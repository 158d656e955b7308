"""Every failure of an `ore` command as one line that says what to do.

A traceback tells a user nothing they can act on: `OreError` messages are written
for people already; operating-system errors (a read-only directory, a port in use)
are translated here; anything else becomes one line naming the exception and how to
see the traceback. `--debug` (or `ORE_DEBUG=1`) keeps the traceback instead.
"""

from __future__ import annotations

import errno
import os
import re

from ore_core.errors import OreError

__all__ = ["DEBUG_ENV", "debug_requested", "one_line"]

DEBUG_ENV = "ORE_DEBUG"
"""Set to 1 (or pass `--debug`) to see tracebacks instead of one-line errors."""

_TRACEBACK_HINT = f"run with --debug (or {DEBUG_ENV}=1) to see the traceback"
_BIND_ADDRESS = re.compile(r"\('?([\d.:a-fA-F]+)'?, (\d+)\)")
_NOT_WRITABLE = (errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOTDIR)


def debug_requested(flag: bool) -> bool:
    """True when tracebacks should be shown: `--debug` or a true `ORE_DEBUG`."""
    return flag or os.environ.get(DEBUG_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def one_line(exc: BaseException) -> str:
    """The message for `exc`: what went wrong and what to do, on one line."""
    exc = _unwrap(exc)
    if isinstance(exc, OreError):
        return _flat(str(exc))
    if isinstance(exc, OSError):
        return _os_error(exc)
    detail = f": {_flat(str(exc))}" if str(exc) else ""
    return f"unexpected {type(exc).__name__}{detail} ({_TRACEBACK_HINT})"


def _unwrap(exc: BaseException) -> BaseException:
    """The single real error inside (nested) exception groups of one member."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def _os_error(exc: OSError) -> str:
    reason = (exc.strerror or str(exc)).lower()
    if exc.errno in _NOT_WRITABLE and exc.filename:
        return (
            f"cannot write {exc.filename}: {reason}; make it writable, or point ore at "
            "another place (XDG_STATE_HOME for its state directory, store.path / "
            "--store-path for the threads)"
        )
    if exc.errno == errno.EADDRINUSE:
        found = _BIND_ADDRESS.search(str(exc))
        where = f"{found.group(1)}:{found.group(2)}" if found else "the address"
        return (
            f"cannot listen on {where}: another process uses it; choose another port "
            "(--port, --health-port) or stop that process"
        )
    where = f" {exc.filename}" if exc.filename else ""
    return f"{reason}{':' if where else ''}{where} ({_TRACEBACK_HINT})"


def _flat(text: str) -> str:
    return " ".join(text.split())
