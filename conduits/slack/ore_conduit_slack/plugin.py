"""The pluggy plugin (entry point `ore: slack = "ore_conduit_slack.plugin"`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ore_conduit_slack.conduit import SlackConduit
from ore_core import hookimpl

__all__ = ["ore_register_conduits"]


@hookimpl
def ore_register_conduits(register: Callable[[type[Any]], None]) -> None:
    """Offer the Slack conduit as `ore conduit slack`."""
    register(SlackConduit)
