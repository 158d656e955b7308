"""Plugins: pluggy hookspecs, the plugin manager, entry-point loading, registrations."""

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
