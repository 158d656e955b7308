"""Every hook a plugin can implement: the whole extension surface of ore in one file.

Plugins are modules (or objects) whose functions carry the `hookimpl` marker and are
named after a hook below; installed distributions announce them under the `ore`
entry-point group::

    # pyproject.toml of a plugin distribution
    [project.entry-points.ore]
    weather = "ore_weather"

    # ore_weather.py
    from ore_core.plugins.hookspecs import hookimpl

    @hookimpl
    def ore_register_tools(register):
        register(Tool("weather", "Current weather for a city", SCHEMA, get_weather))

Every hook is synchronous and called once at start-up (none is on the per-message
path): registration hooks receive a `register` callable and hand it objects whose
async methods the core awaits directly later (`ore_compact` returns one). A hook
implementation may accept any subset of the arguments listed here, by name. When
several plugins implement a hook, pluggy calls the most recently registered first
(built-ins are registered before entry points); `@hookimpl(tryfirst=True)` /
`trylast=True` change that.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    import click

    from ore_core.artifacts import Artifact
    from ore_core.config import OreSettings
    from ore_core.plugins.tools import Tool
    from ore_core.session.compactor import Summariser
    from ore_core.session.manager import Manager
    from ore_core.session.protocols import (
        Interceptor,
        Sink,
        StoreFactory,
        TurnProcessorFactory,
    )

__all__ = ["ENTRY_POINT_GROUP", "PROJECT_NAME", "hookimpl", "hookspec"]

PROJECT_NAME = "ore"
"""The pluggy project name: hook names start with `ore_`."""

ENTRY_POINT_GROUP = "ore"
"""The entry-point group installed plugin distributions register their module under."""

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)
"""Mark a plugin function as the implementation of the hook of the same name."""


@hookspec(historic=True)
def ore_configure(config: OreSettings) -> None:
    """Called once with the validated settings, before any registration hook.

    :param config: the effective `OreSettings` (file, environment and defaults merged).
        A plugin reads its own table with `config.plugin_config("<plugin name>")`
        (the `[plugins.<name>]` section of `ore.toml`, or `ORE_PLUGINS__<NAME>__<KEY>`).

    Historic: a plugin registered after start-up is called with the same settings
    as soon as it is registered. The return value is ignored.
    """


@hookspec
def ore_register_interceptors(register: Callable[[Interceptor], None]) -> None:
    """Register interceptors: they run before the turn processor on every ingress event.

    :param register: call it with each `Interceptor` (an object with `name`, `order`
        and `async intercept(event, stream)`, see `ore_core.session.protocols`).

    The chain runs in ascending `order`; equal orders keep the order in which
    `register` was called. The return value is ignored.
    """


@hookspec
def ore_register_sinks(register: Callable[[Sink], None]) -> None:
    """Register sinks: observers of the output events of every thread.

    :param register: call it with each `Sink` (an object with `name`, `kinds` (a
        frozenset of event kinds; empty = all) and `async emit(thread_id, event)`).

    A slow or failing sink never stalls a thread. The return value is ignored.
    """


@hookspec
def ore_register_stores(register: Callable[[str, StoreFactory], None]) -> None:
    """Register named store factories (where threads live between events).

    :param register: call it as `register(name, factory)`; `factory(section)` builds a
        `Store` from the `[store]` table of the settings when `store.name == name`.

    Names are unique across plugins: registering a taken name is an error naming
    both. The return value is ignored.
    """


@hookspec
def ore_register_turn_processors(register: Callable[[str, TurnProcessorFactory], None]) -> None:
    """Register named turn processor factories (what answers a user message).

    :param register: call it as `register(name, factory)`; `factory(section)` builds a
        `TurnProcessor` (`async processor(ctx)`) from the `[processor]` table of the
        settings when `processor.name == name`. A factory that declares a `tools`
        parameter is called as `factory(section, tools=...)` with every tool plugins
        registered (`ore_register_tools`, a name -> Tool mapping).

    Names are unique across plugins. The return value is ignored.
    """


@hookspec
def ore_register_conduits(register: Callable[[type[Any]], None]) -> None:
    """Register conduit classes, started with `ore conduit NAME`.

    :param register: call it with each conduit class. The class has a class attribute
        `name` (the NAME on the command line, unique across plugins) and an
        `async run(client, config)` method that talks to the core through a
        `ConduitClient` until it is cancelled.

    The return value is ignored.
    """


@hookspec
def ore_register_artifact_kinds(register: Callable[[type[Artifact]], None]) -> None:
    """Register artifact classes so turns holding their kinds decode to them.

    :param register: call it with each `Artifact` subclass; its `KIND` class variable
        is the kind string (prefix it with your plugin name to avoid clashes). Delta
        classes are refused: deltas are never stored.

    Kinds without a registered class still round-trip as `UnknownArtifact`.
    The return value is ignored.
    """


@hookspec
def ore_register_tools(register: Callable[[Tool], None]) -> None:
    """Register tools that LLM turn processors may offer to their model.

    :param register: call it with each `ore_core.plugins.tools.Tool` (name,
        description, JSON-schema parameters, async function). Names are unique.

    The return value is ignored.
    """


@hookspec
def ore_register_commands(cli: click.Group) -> None:
    """Add commands to the `ore` command line.

    :param cli: a click group; decorate functions with `@cli.command()` (or
        `@cli.group()`) to make `ore <name>` available.

    Called when `ore` resolves its commands. Built-in commands keep their names:
    a plugin command with the same name is ignored. The return value is ignored.
    """


@hookspec(firstresult=True)
def ore_compact(config: OreSettings) -> Summariser | None:
    """Offer the summariser that compaction uses instead of the processor's model.

    :param config: the settings (`config.compaction` holds the compaction settings).

    Return an async callable `summarise(turns, prompt, model) -> str` (see
    `ore_core.session.compactor.Summariser`): `turns` are the older turns being
    replaced, `prompt` what a model would be asked (it names what to keep), `model` the
    configured summary model or the thread's. Its text becomes the summary turn; an
    exception or a text no shorter than the turns keeps the thread whole. Return None
    to leave it to the next plugin (or the processor). The first non-None result wins;
    called once at start-up.
    """


@hookspec
def ore_startup(manager: Manager) -> Awaitable[None] | None:
    """Called when a core worker has built its session `Manager`, before it takes input.

    :param manager: the `ore_core.session.manager.Manager` about to serve threads.

    May be `async def` (or return an awaitable): the core awaits each result in hook
    order, and a failure aborts the start-up.
    """


@hookspec
def ore_shutdown(manager: Manager) -> Awaitable[None] | None:
    """Called when a core worker stops, after it took its last input.

    :param manager: the same `Manager` that `ore_startup` received.

    May be `async def` (or return an awaitable): every result is awaited even when
    another plugin's shutdown fails (failures are logged).
    """
