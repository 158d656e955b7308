"""Fixtures for testing plugins: a fresh plugin manager and temporary registration.

    def test_my_interceptor_is_registered(ore_plugin_manager, ore_register_plugin):
        ore_register_plugin(my_plugin)
        registrations = collect_registrations(ore_plugin_manager, OreSettings())
        assert "my-interceptor" in [i.name for i in registrations.interceptors]

Registration is checked like an installed plugin's (a misspelt hook raises
`PluginError` naming it) and always undone, even when the test fails.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest

from ore_core.plugins.manager import OrePluginManager, check_hooks, create_plugin_manager

__all__ = ["ore_isolated_env", "ore_plugin_manager", "ore_register_plugin", "temporary_plugin"]


@contextmanager
def temporary_plugin(
    manager: OrePluginManager, plugin: object, name: str | None = None
) -> Iterator[str | None]:
    """Register `plugin` (a module, class or object of hookimpls) for the `with` block.

    Yields the name it is registered under (None if that name is blocked);
    unregisters it on exit, however the block ends.
    """
    registered = manager.register(plugin, name=name)
    try:
        check_hooks(manager)
        yield registered
    finally:
        if manager.is_registered(plugin):
            manager.unregister(plugin)


@pytest.fixture
def ore_isolated_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No `ORE_*` variables, and user config/state directories inside `tmp_path`.

    What ore reads from the environment (settings, `ORE_LOAD_PLUGINS`, the user's
    own `ore.toml`) then comes only from the test. Returns the temporary home.
    """
    for name in [name for name in os.environ if name.upper().startswith("ORE_")]:
        monkeypatch.delenv(name)
    home = tmp_path / "home"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / "config"))
    monkeypatch.setenv("XDG_STATE_HOME", str(home / "state"))
    return home


@pytest.fixture
def ore_plugin_manager() -> OrePluginManager:
    """A fresh plugin manager with the built-in plugins and no installed ones."""
    return create_plugin_manager(load_entry_points=False)


@pytest.fixture
def ore_register_plugin(
    ore_plugin_manager: OrePluginManager,
) -> Iterator[Callable[..., str | None]]:
    """`ore_register_plugin(obj, name=None) -> name`: registered in `ore_plugin_manager`
    until the end of the test."""
    with ExitStack() as stack:

        def register(plugin: object, name: str | None = None) -> str | None:
            return stack.enter_context(temporary_plugin(ore_plugin_manager, plugin, name))

        yield register
