"""The pluggy plugin (entry point `ore: discord = "ore_conduit_discord.plugin"`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ore_conduit_discord.conduit import DiscordConduit
from ore_core import hookimpl

__all__ = ["ore_register_conduits"]


@hookimpl
def ore_register_conduits(register: Callable[[type[Any]], None]) -> None:
    """Offer the Discord conduit as `ore conduit discord`."""
    register(DiscordConduit)
