"""Built-in slash commands (`/help`, `/model`, `/undo`, `/fork`, ...) as an interceptor."""

from __future__ import annotations

from collections.abc import Callable

from ore_core.plugins.hookspecs import hookimpl
from ore_core.session.protocols import Interceptor
from ore_core.session.slash import default_commands

__all__ = ["ore_register_interceptors"]


@hookimpl
def ore_register_interceptors(register: Callable[[Interceptor], None]) -> None:
    """Register a fresh `SlashCommands` (one per runtime: bindings are never shared)."""
    register(default_commands())
