"""Built-in turn processor `echo`: answers with the user's own words, no model needed."""

from __future__ import annotations

from collections.abc import Callable

from ore_core.plugins.hookspecs import hookimpl
from ore_core.session.echo import echo_factory
from ore_core.session.protocols import TurnProcessorFactory

__all__ = ["ECHO", "ore_register_turn_processors"]

ECHO = "echo"
"""The processor name; also what the core falls back to when the configured one is missing."""


@hookimpl
def ore_register_turn_processors(register: Callable[[str, TurnProcessorFactory], None]) -> None:
    """Offer `processor.name = "echo"` (the default, so ore answers out of the box)."""
    register(ECHO, echo_factory)
