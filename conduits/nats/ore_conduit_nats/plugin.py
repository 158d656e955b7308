"""The pluggy plugin (entry point `ore: nats = "ore_conduit_nats.plugin"`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ore_conduit_nats.bridge import NatsBridge
from ore_core import hookimpl

__all__ = ["ore_register_conduits"]


@hookimpl
def ore_register_conduits(register: Callable[[type[Any]], None]) -> None:
    """Offer the bridge as `ore conduit nats`."""
    register(NatsBridge)
