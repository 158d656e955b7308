"""The pluggy plugin: registers the web conduit (entry point `ore: web`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ore_conduit_web.conduit import WebConduit
from ore_core import hookimpl

__all__ = ["ore_register_conduits"]


@hookimpl
def ore_register_conduits(register: Callable[[type[Any]], None]) -> None:
    """Offer `ore conduit web`."""
    register(WebConduit)
