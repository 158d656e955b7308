"""The built-in plugins: ore's own stores, echo processor, slash commands and log sink.

Each module is a plain plugin registered through the same hooks as an installed
distribution (listed in `ore_core.plugins.manager.BUILTIN_PLUGINS`), so a
third-party plugin can replace or extend any of them, and `ore plugins --all`
shows them next to the installed ones.
"""
