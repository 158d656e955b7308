"""The `ore` console script: the command line, quiet when Ctrl-C comes early.

Ctrl-C while ore is still importing its modules (the first second of `ore serve`)
arrives before click can turn it into an exit: without this wrapper Python prints a
`KeyboardInterrupt` traceback through the import machinery. Only this module, and
nothing heavy, is imported before the guard is in place.
"""

from __future__ import annotations

import sys

__all__ = ["INTERRUPTED", "run"]

INTERRUPTED = 130
"""The exit status of a command stopped by Ctrl-C (128 + SIGINT), as shells report it."""


def run() -> None:
    """Run `ore` (click's `main`); Ctrl-C at any moment ends it with status 130."""
    try:
        from ore_core.cli.main import main

        main()
    except KeyboardInterrupt:
        sys.stderr.write("\n")
        raise SystemExit(INTERRUPTED) from None
