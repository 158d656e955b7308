"""What the command line's tests share: `ore` run in this process."""

from __future__ import annotations

from typing import Any

from click.testing import CliRunner, Result

from ore_core.cli import main


def ore(*args: str, **kwargs: Any) -> Result:
    """`ore ARGS` run in this process by click's runner (`input=`, `env=` in kwargs)."""
    return CliRunner().invoke(main, list(args), **kwargs)
