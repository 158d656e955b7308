"""Building the plugin manager: built-in plugins, installed entry points, checks, tracing.

`create_plugin_manager()` returns a fresh manager every call (no module-global
manager: tests and several workers in one process never share plugin state). A
third-party plugin that fails to import, or that implements a hook that does not
exist, is left out and recorded in `load_errors` (shown by `ore plugins`) so one
broken install never stops ore; a broken built-in is a bug and raises.

Environment:
- `ORE_LOAD_PLUGINS=dist-a,dist-b` loads only these distributions (empty: none);
  built-ins are always loaded.
- `ORE_TRACE_PLUGINS=1` logs every hook call and its outcome through structlog.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import os
import re
from collections.abc import Awaitable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from importlib.metadata import Distribution, distributions
from typing import TYPE_CHECKING, Any, TypeVar

import pluggy
import structlog

from ore_core.errors import OreError
from ore_core.plugins import hookspecs
from ore_core.plugins.hookspecs import ENTRY_POINT_GROUP, PROJECT_NAME

if TYPE_CHECKING:
    from ore_core.session.manager import Manager

__all__ = [
    "BUILTIN_PLUGINS",
    "HOOK_NAMES",
    "LOAD_PLUGINS_ENV",
    "TRACE_PLUGINS_ENV",
    "OrePluginManager",
    "PluginError",
    "PluginInfo",
    "PluginLoadFailure",
    "await_maybe",
    "check_hooks",
    "create_plugin_manager",
    "plugin_callers",
    "shutdown_plugins",
    "startup_plugins",
]

BUILTIN_PLUGINS: list[str] = [
    "ore_core.plugins.builtin.stores",
    "ore_core.bus.store.store_plugin",
    "ore_core.plugins.builtin.processors",
    "ore_core.plugins.builtin.commands",
    "ore_core.plugins.builtin.files",
    "ore_core.plugins.builtin.log_sink",
]
"""Modules registered as plugins before any entry point, in this order.

Built-in features use the same hooks as third-party plugins (llm's `DEFAULT_PLUGINS`
idea); add a module path here to ship one (e.g. `"ore_core.plugins.builtin.echo"`).
Named, not imported: a lower floor offers its own (the bus its JetStream store) without
this module importing it.
"""

LOAD_PLUGINS_ENV = "ORE_LOAD_PLUGINS"
TRACE_PLUGINS_ENV = "ORE_TRACE_PLUGINS"

HOOK_NAMES: tuple[str, ...] = tuple(
    sorted(name for name in vars(hookspecs) if name.startswith(f"{PROJECT_NAME}_"))
)
"""Every hook ore defines."""

_log = structlog.get_logger("ore.plugins")
T = TypeVar("T")


class PluginError(OreError):
    """A plugin is unusable: unknown hook, invalid or duplicate registration, failed hook."""


@dataclass(frozen=True, slots=True)
class PluginLoadFailure:
    """A plugin that was left out, and why (`ore plugins` reports these)."""

    name: str
    distribution: str
    version: str | None
    error: str


@dataclass(frozen=True, slots=True)
class PluginInfo:
    """One registered plugin as `ore plugins` shows it."""

    name: str
    distribution: str | None
    version: str | None
    hooks: tuple[str, ...]
    builtin: bool


class OrePluginManager(pluggy.PluginManager):
    """A pluggy manager with ore's hookspecs, remembering where each plugin came from."""

    def __init__(self) -> None:
        super().__init__(PROJECT_NAME)
        self.add_hookspecs(hookspecs)
        self.load_errors: list[PluginLoadFailure] = []
        """Plugins that were left out, in the order they failed."""
        self._builtins: set[str] = set()
        self._distributions: dict[str, Distribution] = {}

    def register_builtin(self, module_path: str) -> None:
        """Import and register a built-in plugin module under its module path."""
        self.register(importlib.import_module(module_path), name=module_path)
        self._builtins.add(module_path)

    def register_entry_point_plugin(self, plugin: object, name: str, dist: Distribution) -> None:
        """Register a plugin loaded from `dist`'s entry point `name`."""
        self.register(plugin, name=name)
        self._distributions[name] = dist

    def distribution(self, name: str) -> Distribution | None:
        """The installed distribution a plugin came from (None for built-ins and objects)."""
        return self._distributions.get(name)

    def describe(self, *, include_builtins: bool = False) -> list[PluginInfo]:
        """The registered plugins sorted by name, with distribution, version and hooks."""
        infos = []
        for name, plugin in self.list_name_plugin():
            builtin = name in self._builtins
            if builtin and not include_builtins:
                continue
            dist = self._distributions.get(name)
            callers = self.get_hookcallers(plugin) or []
            infos.append(
                PluginInfo(
                    name=name,
                    distribution=dist.metadata["Name"] if dist else None,
                    version=dist.version if dist else None,
                    hooks=tuple(sorted(caller.name for caller in callers)),
                    builtin=builtin,
                )
            )
        return sorted(infos, key=lambda info: info.name)

    def hook_implementers(self, *, include_builtins: bool = False) -> dict[str, list[str]]:
        """Hook name -> names of the plugins implementing it, in the order they are called."""
        table = {}
        for hook_name in HOOK_NAMES:
            names = (
                self.get_name(plugin) or repr(plugin) for plugin in _call_order(self, hook_name)
            )
            table[hook_name] = [n for n in names if include_builtins or n not in self._builtins]
        return table

    def record_load_error(
        self, name: str, distribution: str, version: str | None, error: str
    ) -> None:
        """Remember (and log) that plugin `name` was left out because of `error`."""
        failure = PluginLoadFailure(name, distribution, version, error)
        self.load_errors.append(failure)
        _log.warning(
            "plugin.load_failed",
            plugin=name,
            distribution=distribution,
            version=version,
            error=error,
        )


def create_plugin_manager(
    *, load_entry_points: bool = True, builtins: bool = True
) -> OrePluginManager:
    """A fresh manager with ore's hookspecs, the built-ins and the installed plugins.

    Honours `ORE_LOAD_PLUGINS` and `ORE_TRACE_PLUGINS` (see the module docstring).
    Only a broken built-in raises (its import error, or `PluginError` for an unknown
    hook); third-party failures end up in `manager.load_errors`.
    """
    manager = OrePluginManager()
    if _flag(os.environ.get(TRACE_PLUGINS_ENV, "")):
        manager.add_hookcall_monitoring(_trace_before, _trace_after)
    if builtins:
        for module_path in BUILTIN_PLUGINS:
            manager.register_builtin(module_path)
    if load_entry_points:
        _load_entry_points(manager, _allowlist(os.environ.get(LOAD_PLUGINS_ENV)))
    check_hooks(manager)
    return manager


def check_hooks(manager: OrePluginManager) -> None:
    """Run pluggy's `check_pending`: every hook implementation must name a real hook.

    An entry-point plugin with an unknown hook (usually a typo) is unregistered and
    recorded in `load_errors`; any other plugin raises `PluginError` naming it.
    """
    while True:
        try:
            manager.check_pending()
            return
        except pluggy.PluginValidationError as exc:
            name = manager.get_name(exc.plugin) or repr(exc.plugin)
            message = _unknown_hooks_message(manager, exc.plugin)
            dist = manager.distribution(name)
            if dist is None:
                raise PluginError(f'plugin "{name}" {message}') from None
            manager.unregister(exc.plugin)
            manager.record_load_error(name, dist.metadata["Name"], dist.version, message)


def plugin_callers(
    manager: pluggy.PluginManager, hook_name: str
) -> Iterator[tuple[str, pluggy.HookCaller]]:
    """(plugin name, a caller of that plugin's implementation only), in call order.

    Lets ore call plugins one at a time through pluggy (so tracing still sees each
    call) to await their results in order, attribute failures, or isolate them.
    """
    plugins = _call_order(manager, hook_name)
    for plugin in plugins:
        others = [other for other in plugins if other is not plugin]
        name = manager.get_name(plugin) or repr(plugin)
        yield name, manager.subset_hook_caller(hook_name, remove_plugins=others)


async def await_maybe(value: T | Awaitable[T]) -> T:
    """`value`, awaited first if it is awaitable: for hooks that may be `async def`."""
    if inspect.isawaitable(value):
        result: T = await value
        return result
    return value


async def startup_plugins(manager: pluggy.PluginManager, session_manager: Manager) -> None:
    """Call `ore_startup` plugin by plugin, awaiting each; the first failure aborts.

    Raises `PluginError` naming the plugin that failed (the cause is chained).
    """
    for name, caller in plugin_callers(manager, "ore_startup"):
        try:
            for result in caller(manager=session_manager):
                await await_maybe(result)
        except Exception as exc:
            raise PluginError(f'plugin "{name}" failed in ore_startup: {exc!r}') from exc


async def shutdown_plugins(manager: pluggy.PluginManager, session_manager: Manager) -> None:
    """Call `ore_shutdown` plugin by plugin; a failing plugin is logged, the rest still run."""
    for name, caller in plugin_callers(manager, "ore_shutdown"):
        try:
            for result in caller(manager=session_manager):
                await await_maybe(result)
        except Exception:
            # Shutdown must reach every plugin; one plugin's bug cannot keep others open.
            _log.exception("plugin.shutdown_failed", plugin=name)


def _flag(value: str) -> bool:
    return value.strip().lower() in {"1", "true", "yes", "on"}


def _canonical(name: str) -> str:
    """PEP 503 normalised distribution name (`Ore_Test.Plugin` -> `ore-test-plugin`)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _allowlist(value: str | None) -> set[str] | None:
    if value is None:
        return None
    return {_canonical(part.strip()) for part in value.split(",") if part.strip()}


def _load_entry_points(manager: OrePluginManager, allowed: set[str] | None) -> None:
    found: set[str] = set()
    for dist in distributions():
        points = [ep for ep in dist.entry_points if ep.group == ENTRY_POINT_GROUP]
        dist_name = _canonical(dist.metadata["Name"] or "")
        if not points or (allowed is not None and dist_name not in allowed):
            continue
        found.add(dist_name)
        for point in points:
            # A distribution can appear twice on sys.path; the first copy wins.
            if manager.has_plugin(point.name) or manager.is_blocked(point.name):
                continue
            try:
                manager.register_entry_point_plugin(point.load(), point.name, dist)
            except Exception as exc:
                # Third-party import code can raise anything; it must not stop ore.
                error = f"{type(exc).__name__}: {exc}"
                manager.record_load_error(point.name, dist.metadata["Name"], dist.version, error)
    for missing in sorted((allowed or set()) - found):
        manager.record_load_error(
            missing,
            missing,
            None,
            f"named in {LOAD_PLUGINS_ENV} but no installed distribution of that name "
            f"has `{ENTRY_POINT_GROUP}` entry points",
        )


def _call_order(manager: pluggy.PluginManager, hook_name: str) -> list[object]:
    """The plugins implementing `hook_name`, in the order pluggy calls them."""
    return [impl.plugin for impl in reversed(getattr(manager.hook, hook_name).get_hookimpls())]


def _unknown_hooks_message(manager: pluggy.PluginManager, plugin: object) -> str:
    unknown = sorted(
        caller.name
        for caller in manager.get_hookcallers(plugin) or []
        if not caller.has_spec()
        and any(impl.plugin is plugin and not impl.optionalhook for impl in caller.get_hookimpls())
    )
    hints = []
    for name in unknown:
        close = difflib.get_close_matches(name, HOOK_NAMES, n=1)
        hints.append(f'"{name}"' + (f' (did you mean "{close[0]}"?)' if close else ""))
    return (
        f"implements unknown hook {', '.join(hints)}; rename it to one of ore's hooks "
        "or mark it @hookimpl(optionalhook=True)"
    )


def _trace_before(
    hook_name: str, hook_impls: Sequence[pluggy.HookImpl], kwargs: Mapping[str, object]
) -> None:
    _log.info(
        "plugin.hook_call",
        hook=hook_name,
        plugins=[impl.plugin_name for impl in reversed(hook_impls)],
        arguments=sorted(kwargs),
    )


def _trace_after(
    outcome: pluggy.Result[Any],
    hook_name: str,
    hook_impls: Sequence[pluggy.HookImpl],
    kwargs: Mapping[str, object],
) -> None:
    if outcome.exception is None:
        _log.info("plugin.hook_done", hook=hook_name)
    else:
        _log.error("plugin.hook_failed", hook=hook_name, error=repr(outcome.exception))
