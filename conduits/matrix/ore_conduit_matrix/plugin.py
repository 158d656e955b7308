"""The pluggy plugin (entry point `ore: matrix = "ore_conduit_matrix.plugin"`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ore_conduit_matrix.conduit import MatrixConduit
from ore_core import hookimpl

__all__ = ["ore_register_conduits"]


@hookimpl
def ore_register_conduits(register: Callable[[type[Any]], None]) -> None:
    """Offer the Matrix conduit as `ore conduit matrix`."""
    register(MatrixConduit)
