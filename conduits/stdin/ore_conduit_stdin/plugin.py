"""The pluggy plugin: registers the stdin conduit (entry point `ore: stdin`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ore_conduit_stdin.conduit import StdinConduit
from ore_core import hookimpl

__all__ = ["ore_register_conduits"]


@hookimpl
def ore_register_conduits(register: Callable[[type[Any]], None]) -> None:
    """Offer `ore conduit stdin` (and the conduit `ore chat` runs)."""
    register(StdinConduit)
