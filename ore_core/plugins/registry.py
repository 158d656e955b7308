"""What the registration hooks fill: interceptors, sinks, named factories, conduits, tools.

`collect_registrations(pm, config)` hands the settings to every plugin
(`ore_configure`), then calls each registration hook once, plugin by plugin, and
returns a `Registrations`. Every registered object is checked on arrival, so a
mistake fails at start-up naming the plugin, not mid-conversation.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import pluggy

from ore_core import artifacts
from ore_core.artifacts import Artifact, ArtifactRegistry
from ore_core.plugins.manager import PluginError, plugin_callers
from ore_core.plugins.tools import Tool
from ore_core.session.protocols import (
    Interceptor,
    Sink,
    StoreFactory,
    TurnProcessorFactory,
)

if TYPE_CHECKING:
    from ore_core.config import OreSettings

__all__ = ["REGISTRATION_HOOKS", "Registrations", "collect_registrations"]

_TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
V = TypeVar("V")


@dataclass
class Registrations:
    """Everything plugins registered, ready for the core to use.

    `interceptors` is kept in run order (ascending `order`, then registration order).
    Artifact kinds go into `artifact_registry` (the process-wide registry unless a
    test passes its own) and are listed in `artifact_kinds`. Names are unique per
    category: registering a taken name raises `PluginError` naming both plugins.
    """

    artifact_registry: ArtifactRegistry = field(default_factory=lambda: artifacts.registry)
    interceptors: list[Interceptor] = field(default_factory=list)
    sinks: list[Sink] = field(default_factory=list)
    stores: dict[str, StoreFactory] = field(default_factory=dict)
    turn_processors: dict[str, TurnProcessorFactory] = field(default_factory=dict)
    conduits: dict[str, type[Any]] = field(default_factory=dict)
    artifact_kinds: dict[str, type[Artifact]] = field(default_factory=dict)
    tools: dict[str, Tool] = field(default_factory=dict)
    _plugin: str = field(default="", init=False, repr=False)
    _owners: dict[tuple[str, str], str] = field(default_factory=dict, init=False, repr=False)

    def interceptor_descriptions(self) -> dict[str, str]:
        """What interceptors with a `describe()` say about themselves (e.g. the guard's
        limits), by name: `ore serve` and `ore chat` print it at start, `ore config` too."""
        described: dict[str, str] = {}
        for interceptor in self.interceptors:
            describe = getattr(interceptor, "describe", None)
            if callable(describe):
                name = getattr(interceptor, "name", type(interceptor).__name__)
                described[str(name)] = str(describe())
        return described

    @contextmanager
    def _registering_for(self, plugin: str) -> Iterator[None]:
        """Attribute registrations made inside the block to `plugin` (for error messages)."""
        previous, self._plugin = self._plugin, plugin
        try:
            yield
        finally:
            self._plugin = previous

    def register_interceptor(self, interceptor: Interceptor) -> None:
        """Add an interceptor to the chain at its `order`, after equal orders."""
        _require(interceptor, Interceptor, "interceptor", "name, order and async intercept()")
        if not isinstance(interceptor.order, int):
            raise PluginError(f"interceptor {interceptor.name!r}: order must be an int")
        self._claim("interceptor", interceptor.name)
        bisect.insort_right(self.interceptors, interceptor, key=lambda item: item.order)

    def register_sink(self, sink: Sink) -> None:
        """Add a sink (observer of output events)."""
        _require(sink, Sink, "sink", "name, kinds (frozenset) and async emit()")
        self._claim("sink", sink.name)
        self.sinks.append(sink)

    def register_store(self, name: str, factory: StoreFactory) -> None:
        """Make a store factory available as `store.name = name`."""
        self._add_named("store", self.stores, name, _callable(factory, "store", name))

    def register_turn_processor(self, name: str, factory: TurnProcessorFactory) -> None:
        """Make a turn processor factory available as `processor.name = name`."""
        checked = _callable(factory, "turn processor", name)
        self._add_named("turn processor", self.turn_processors, name, checked)

    def register_conduit(self, conduit_class: type[Any]) -> None:
        """Make a conduit class available as `ore conduit <conduit_class.name>`."""
        name = getattr(conduit_class, "name", None)
        if not isinstance(conduit_class, type) or not isinstance(name, str):
            raise PluginError(f"conduit {conduit_class!r} must be a class with a str `name`")
        if not callable(getattr(conduit_class, "run", None)):
            raise PluginError(f'conduit "{name}" has no async run(client, config) method')
        self._add_named("conduit", self.conduits, name, conduit_class)

    def register_artifact_kind(self, artifact_class: type[Artifact]) -> None:
        """Register an artifact class in the artifact registry under its `KIND`."""
        if not (isinstance(artifact_class, type) and issubclass(artifact_class, Artifact)):
            raise PluginError(f"artifact kind {artifact_class!r} is not an Artifact subclass")
        self._claim("artifact kind", artifact_class.KIND)
        self.artifact_kinds[artifact_class.KIND] = self.artifact_registry.register(artifact_class)

    def register_tool(self, tool: Tool) -> None:
        """Offer a tool to LLM turn processors."""
        if not isinstance(tool, Tool):
            raise PluginError(f"tool {tool!r} is not an ore_core.plugins.tools.Tool")
        if not _TOOL_NAME.fullmatch(tool.name):
            raise PluginError(f"tool name {tool.name!r} must be 1-64 letters, digits, _ or -")
        if tool.parameters.get("type") != "object":
            raise PluginError(f'tool "{tool.name}": parameters must be a JSON schema object')
        _callable(tool.function, "tool", tool.name)
        self._add_named("tool", self.tools, tool.name, tool)

    def store_factory(self, name: str) -> StoreFactory:
        """The factory of store `name`; `PluginError` listing the known ones if missing."""
        return _lookup("store", self.stores, name)

    def turn_processor_factory(self, name: str) -> TurnProcessorFactory:
        """The factory of turn processor `name`; `PluginError` listing the known ones."""
        return _lookup("turn processor", self.turn_processors, name)

    def conduit(self, name: str) -> type[Any]:
        """The conduit class `name`; `PluginError` listing the known ones if missing."""
        return _lookup("conduit", self.conduits, name)

    def _add_named(self, category: str, table: dict[str, V], name: str, value: V) -> None:
        if not isinstance(name, str) or not name:
            raise PluginError(f"{category} name must be a non-empty string, got {name!r}")
        self._claim(category, name)
        table[name] = value

    def _claim(self, category: str, name: str) -> None:
        owner = self._owners.get((category, name))
        if owner is not None:
            raise PluginError(
                f'{category} "{name}" is registered twice: by {_by(owner)} and by '
                f"{_by(self._plugin)}; uninstall one of them or limit plugins with ORE_LOAD_PLUGINS"
            )
        self._owners[(category, name)] = self._plugin


REGISTRATION_HOOKS: dict[str, Callable[[Registrations], Callable[..., None]]] = {
    "ore_register_interceptors": lambda r: r.register_interceptor,
    "ore_register_sinks": lambda r: r.register_sink,
    "ore_register_stores": lambda r: r.register_store,
    "ore_register_turn_processors": lambda r: r.register_turn_processor,
    "ore_register_conduits": lambda r: r.register_conduit,
    "ore_register_artifact_kinds": lambda r: r.register_artifact_kind,
    "ore_register_tools": lambda r: r.register_tool,
}
"""Each registration hook and the `Registrations` method its `register` argument is."""


def collect_registrations(
    pm: pluggy.PluginManager,
    config: OreSettings,
    *,
    artifact_registry: ArtifactRegistry | None = None,
) -> Registrations:
    """Configure every plugin, then call each registration hook once; return the result.

    Plugins are called one at a time so that a failure (an invalid object, a taken
    name, an exception in the hook) raises `PluginError` naming the plugin and hook.
    Call it once per manager: `ore_configure` is historic, so every call is also
    replayed to plugins registered afterwards.
    """
    registrations = Registrations()
    if artifact_registry is not None:
        registrations.artifact_registry = artifact_registry
    pm.hook.ore_configure.call_historic(kwargs={"config": config})
    for hook_name, method in REGISTRATION_HOOKS.items():
        register = method(registrations)
        for plugin, caller in plugin_callers(pm, hook_name):
            with registrations._registering_for(plugin):
                try:
                    caller(register=register)
                except Exception as exc:
                    raise PluginError(f'plugin "{plugin}" failed in {hook_name}: {exc}') from exc
    _register_compactor(pm, config, registrations)
    return registrations


def _register_compactor(
    pm: pluggy.PluginManager, config: OreSettings, registrations: Registrations
) -> None:
    """The compaction step, with the summariser a plugin offers (`ore_compact`), if any."""
    from ore_core.session.compactor import Compactor
    from ore_core.session.slash import SlashCommands

    summariser = None
    for plugin, caller in plugin_callers(pm, "ore_compact"):
        try:
            summariser = caller(config=config)
        except Exception as exc:
            raise PluginError(f'plugin "{plugin}" failed in ore_compact: {exc}') from exc
        if summariser is None:
            continue
        if not callable(summariser):
            raise PluginError(
                f'plugin "{plugin}": ore_compact returned {summariser!r}, not a summariser'
            )
        break
    compactor = Compactor(config.compaction, summariser)
    for interceptor in registrations.interceptors:
        if isinstance(interceptor, SlashCommands):
            compactor.list_commands(interceptor)
    registrations.register_interceptor(compactor)


def _by(plugin: str) -> str:
    return f'plugin "{plugin}"' if plugin else "code outside any plugin"


def _require(obj: object, protocol: type, category: str, needs: str) -> None:
    if not isinstance(obj, protocol):
        raise PluginError(f"{category} {obj!r} does not have {needs}")


def _callable(value: V, category: str, name: str) -> V:
    if not callable(value):
        raise PluginError(f'{category} "{name}": {value!r} is not callable')
    return value


def _lookup(category: str, table: Mapping[str, V], name: str) -> V:
    try:
        return table[name]
    except KeyError:
        known = ", ".join(sorted(table)) or "none"
        raise PluginError(
            f'no {category} named "{name}" (registered: {known}); install the plugin '
            "that provides it (`ore install ...`) or check `ore plugins`"
        ) from None
