"""`ore new`: a ready plugin package (hook, tests, README, CI) from templates inside ore."""

from ore_core.scaffold.render import KINDS, Kind, PluginNames, ScaffoldError, plan, write

__all__ = ["KINDS", "Kind", "PluginNames", "ScaffoldError", "plan", "write"]
