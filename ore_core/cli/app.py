"""Building a running core from settings and plugins: what `ore serve`, `ore chat` share.

`build_runtime(settings, pm)` asks every plugin for its registrations once, builds
the configured store and turn processor from the registered factories, assembles a
session `Manager` with the plugins' interceptors and sinks, and runs the
`ore_startup` hooks. `Runtime.aclose()` undoes it in reverse: `ore_shutdown`, then
the manager (its streams drain), then the store. `start_embedded_nats` is the
private nats-server both commands start when no NATS URL is configured.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pluggy
import structlog

from ore_core.bus.server.durability import SyncPolicy, operator_durability
from ore_core.bus.server.embedded import EmbeddedNatsServer
from ore_core.config import NatsSettings, OreSettings, StoreSettings
from ore_core.plugins.builtin.processors import ECHO
from ore_core.plugins.manager import shutdown_plugins, startup_plugins
from ore_core.plugins.registry import Registrations, collect_registrations
from ore_core.session.manager import Manager
from ore_core.session.protocols import Store, TurnProcessor
from ore_core.session.store_health import store_probe
from ore_core.tasks import AsyncClosing

__all__ = [
    "Runtime",
    "build_processor",
    "build_runtime",
    "deployment_durability",
    "embedded_config",
    "open_store",
    "opened_processor",
    "start_embedded_nats",
    "store_section",
]

log = structlog.get_logger("ore.app")


@dataclass
class Runtime(AsyncClosing):
    """A started core: settings, plugins, their registrations, the store and the Manager.

    `notices` are start-up messages meant for the person running ore (already logged
    once), e.g. that the configured processor is missing and echo answers instead.
    Use `async with` or call `aclose()` exactly as the owner of the runtime.
    """

    settings: OreSettings
    plugins: pluggy.PluginManager
    registrations: Registrations
    store: Store
    manager: Manager
    notices: list[str] = field(default_factory=list)
    processor: str = ""
    """The name of the processor that answers (after any fallback to echo)."""
    processor_description: str = ""
    """What answers, e.g. `openai model gpt-4o-mini at https://...` (its `describe()`)."""
    _closed: bool = field(default=False, init=False, repr=False)

    async def aclose(self) -> None:
        """Run `ore_shutdown`, close the manager (streams drain), then the store. Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            await shutdown_plugins(self.plugins, self.manager)
            await self.manager.aclose()
        finally:
            await self.store.close()


def store_section(settings: StoreSettings) -> dict[str, Any]:
    """The `[store]` table for the store factory: `name` plus the keys actually set.

    Defaults are left out on purpose: each store picks its own default `path` (a file
    for sqlite, a directory for json and journal).
    """
    return {"name": settings.name, **settings.model_dump(exclude_unset=True)}


def open_store(registrations: Registrations, section: Mapping[str, Any]) -> Store:
    """The store named `section["name"]`, built by its registered factory.

    Raises `PluginError` when no plugin provides that store, `ConfigError` for bad keys.
    """
    return registrations.store_factory(str(section["name"]))(section)


def delta_intervals(registrations: Registrations, settings: OreSettings) -> dict[str, float]:
    """Delta pacing per namespace: what installed conduit classes declare in their
    capabilities (for their name), then `session.delta_intervals` over it."""
    declared: dict[str, float] = {}
    for name, conduit in registrations.conduits.items():
        capabilities = getattr(conduit, "capabilities", None)
        interval = getattr(capabilities, "delta_interval", None)
        if interval is not None:
            declared[name] = float(interval)
    return {**declared, **settings.session.delta_intervals}


async def build_runtime(settings: OreSettings, pm: pluggy.PluginManager) -> Runtime:
    """Collect the plugins' registrations once, build store, processor and Manager, start up.

    A store that cannot be used (a damaged file, a read-only directory) raises its
    StoreError here, before anything says it is ready.

    A configured processor that no plugin provides falls back to `echo`, with one
    warning logged and returned in `Runtime.notices`. A failing `ore_startup` hook
    closes everything built so far and raises `PluginError` naming the plugin.
    """
    registrations = collect_registrations(pm, settings)
    notices: list[str] = []
    store = open_store(registrations, store_section(settings.store))
    try:
        if not callable(getattr(store, "attach_nats", None)):  # else checked once attached
            await store_probe(store)()  # a damaged store stops the start, in one line
        name, processor = build_processor(registrations, settings, notices)
        manager = Manager(
            store,
            processor,
            interceptors=registrations.interceptors,
            sinks=registrations.sinks,
            policy=settings.session.double_texting,
            idle_timeout=settings.session.idle_timeout or None,
            delta_interval=settings.session.delta_interval,
            delta_max_bytes=settings.session.delta_max_bytes,
            delta_intervals=delta_intervals(registrations, settings),
        )
    except BaseException:
        await store.close()
        raise
    describe = getattr(processor, "describe", None)
    description = str(describe()) if callable(describe) else name
    runtime = Runtime(settings, pm, registrations, store, manager, notices, name, description)
    try:
        await startup_plugins(pm, manager)
    except BaseException:
        # Plugins that started may hold resources: they get their shutdown call too.
        await runtime.aclose()
        raise
    return runtime


async def start_embedded_nats(
    settings: NatsSettings, *, port: int | None = None, auth: str | None = None
) -> EmbeddedNatsServer:
    """A started private nats-server (loopback, JetStream, data under the user state dir).

    Its `max_payload` follows `nats.max_payload`, its fsync policy `nats.sync`; `port`
    fixes the client port (None: any free port); `auth` is an `authorization` block
    (`ore auth`'s nats-auth.conf). The caller owns it: `await astop()`; it also ends
    when this process dies, and an orphan of an earlier process on the same data
    directory is stopped first.
    """
    config = embedded_config(settings) + (auth or "")
    server = EmbeddedNatsServer(config=config, port=port, die_with_parent=True)
    await server.astart()
    return server


def embedded_config(settings: NatsSettings) -> str:
    """The nats-server config every embedded server of ore gets from the settings."""
    return f"max_payload: {int(settings.max_payload)}\n" + SyncPolicy(settings.sync).server_config()


def deployment_durability(settings: NatsSettings) -> str:
    """What the bus keeps through a crash: the embedded server's `nats.sync`, or what an
    operator's server (`nats.url`) and ore's stream replicas mean."""
    if settings.url:
        return operator_durability(settings.replicas)
    return SyncPolicy(settings.sync).describe()


def build_processor(
    registrations: Registrations, settings: OreSettings, notices: list[str]
) -> tuple[str, TurnProcessor]:
    """The configured turn processor and its name, or echo (with a notice) when missing."""
    name = settings.processor.name
    section: dict[str, Any] = settings.processor.model_dump()
    if name not in registrations.turn_processors and ECHO in registrations.turn_processors:
        known = ", ".join(sorted(registrations.turn_processors))
        notice = (
            f'turn processor "{name}" is not installed (registered: {known}); '
            f'answering with "{ECHO}" instead: install the plugin that provides it '
            "(`ore install ...`) or set processor.name"
        )
        log.warning(notice, processor=name, fallback=ECHO)
        notices.append(notice)
        name, section = ECHO, {"name": ECHO}
    factory: Callable[..., TurnProcessor] = registrations.turn_processor_factory(name)
    # A processor that offers tools to a model declares `tools`: hand it the registered ones.
    extra = {"tools": registrations.tools} if _takes_tools(factory) else {}
    return name, factory(section, **extra)


@contextlib.asynccontextmanager
async def opened_processor(
    plugins: pluggy.PluginManager, settings: OreSettings
) -> AsyncIterator[TurnProcessor]:
    """The turn processor `ore serve` would build with `settings` (its settings validated
    then), closed after use: `ore doctor` checks it, `ore models` asks it what it offers."""
    registrations = collect_registrations(plugins, settings)
    _, processor = build_processor(registrations, settings, [])
    try:
        yield processor
    finally:
        close = getattr(processor, "aclose", None)
        if callable(close):
            await close()


def _takes_tools(factory: Callable[..., object]) -> bool:
    try:
        return "tools" in inspect.signature(factory).parameters
    except (TypeError, ValueError):  # some C callables have no signature
        return False
