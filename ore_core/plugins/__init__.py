"""Plugins: pluggy hookspecs, the plugin manager, entry-point loading, registrations."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ore_core import _lazy_exports

if TYPE_CHECKING:
    from ore_core.plugins.hookspecs import ENTRY_POINT_GROUP, PROJECT_NAME, hookimpl
    from ore_core.plugins.manager import (
        BUILTIN_PLUGINS,
        OrePluginManager,
        PluginError,
        PluginInfo,
        PluginLoadFailure,
        await_maybe,
        create_plugin_manager,
        shutdown_plugins,
        startup_plugins,
    )
    from ore_core.plugins.registry import Registrations, collect_registrations
    from ore_core.plugins.tools import Tool

_EXPORTS: dict[str, str] = {
    "ENTRY_POINT_GROUP": "ore_core.plugins.hookspecs",
    "PROJECT_NAME": "ore_core.plugins.hookspecs",
    "hookimpl": "ore_core.plugins.hookspecs",
    "BUILTIN_PLUGINS": "ore_core.plugins.manager",
    "OrePluginManager": "ore_core.plugins.manager",
    "PluginError": "ore_core.plugins.manager",
    "PluginInfo": "ore_core.plugins.manager",
    "PluginLoadFailure": "ore_core.plugins.manager",
    "await_maybe": "ore_core.plugins.manager",
    "create_plugin_manager": "ore_core.plugins.manager",
    "shutdown_plugins": "ore_core.plugins.manager",
    "startup_plugins": "ore_core.plugins.manager",
    "Registrations": "ore_core.plugins.registry",
    "collect_registrations": "ore_core.plugins.registry",
    "Tool": "ore_core.plugins.tools",
}
"""Public name -> the module that defines it, imported on first access."""

__all__ = [
    "BUILTIN_PLUGINS",
    "ENTRY_POINT_GROUP",
    "PROJECT_NAME",
    "OrePluginManager",
    "PluginError",
    "PluginInfo",
    "PluginLoadFailure",
    "Registrations",
    "Tool",
    "await_maybe",
    "collect_registrations",
    "create_plugin_manager",
    "hookimpl",
    "shutdown_plugins",
    "startup_plugins",
]

__getattr__, __dir__ = _lazy_exports(__name__, _EXPORTS)
