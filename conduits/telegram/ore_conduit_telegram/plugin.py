"""The pluggy plugin (entry point `ore: telegram = "ore_conduit_telegram.plugin"`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ore_conduit_telegram.conduit import TelegramConduit
from ore_core import hookimpl

__all__ = ["ore_register_conduits"]


@hookimpl
def ore_register_conduits(register: Callable[[type[Any]], None]) -> None:
    """Offer the Telegram conduit as `ore conduit telegram`."""
    register(TelegramConduit)
