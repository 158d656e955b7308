"""What the `ore` commands share: the invocation's state, common options and helpers.

Commands never import each other; whatever two of them need lives here:
- `cli_state()`: the settings and the plugin manager of this invocation, built on
  first use (plugin commands use it too);
- `nats_option(help)`: the `--nats URL` option (repeatable, for a cluster) and
  `nats_settings`, which applies it (and `--partitions`) to the `[nats]` settings;
- `connect_conduit`: a `ConduitClient` for the configured NATS, with a deadline;
- `bus_config`: the core's `BusConfig` from the `[nats]` settings;
- `table_columns`: aligned text columns for listings.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar, cast

import click
import structlog
from pydantic import ValidationError

from ore_core._nats.connection import NatsCredentials
from ore_core.bus.server.streams import BusConfig
from ore_core.conduit.client import ConduitClient
from ore_core.config import (
    ConfigError,
    FilesSettings,
    LogSettings,
    NatsSettings,
    OreSettings,
    load_settings,
)
from ore_core.errors import BusError, validation_message
from ore_core.files.policy import FilePolicy
from ore_core.logging import configure_logging
from ore_core.plugins.manager import OrePluginManager, create_plugin_manager, plugin_callers

__all__ = [
    "CliState",
    "bus_config",
    "cli_state",
    "connect_conduit",
    "nats_option",
    "nats_settings",
    "table_columns",
]

_STATE_KEY = "ore.cli_state"
_OPTION_OF_KEY = {"url": "--nats", "partitions": "--partitions"}
_log = structlog.get_logger("ore.cli")
_F = TypeVar("_F", bound=Callable[..., object])


@dataclass
class CliState:
    """What the commands of one `ore` invocation share: settings and plugins, built lazily."""

    config_path: Path | None = None
    _settings: OreSettings | None = field(default=None, init=False, repr=False)
    _plugins: OrePluginManager | None = field(default=None, init=False, repr=False)
    _commands: dict[str, click.Command] | None = field(default=None, init=False, repr=False)

    @property
    def settings(self) -> OreSettings:
        """The validated settings (`--config`, `ORE_CONFIG`, `ORE_*`); ConfigError if bad."""
        if self._settings is None:
            self._settings = load_settings(self.config_path)
        return self._settings

    @property
    def plugin_manager(self) -> OrePluginManager:
        """The plugin manager with built-ins and installed plugins loaded."""
        if self._plugins is None:
            self._plugins = create_plugin_manager()
        return self._plugins

    def plugin_commands(self, reserved: Collection[str]) -> dict[str, click.Command]:
        """Commands added by plugins, except `reserved` names (logged, like failing hooks)."""
        if self._commands is None:
            self._commands = {}
            for name, caller in plugin_callers(self.plugin_manager, "ore_register_commands"):
                scratch = click.Group()
                try:
                    caller(cli=scratch)
                except Exception as exc:
                    # `ore uninstall` and `ore plugins` must keep working around a bad plugin.
                    _log.warning("plugin.commands_failed", plugin=name, error=repr(exc))
                    continue
                for command_name, command in scratch.commands.items():
                    if command_name in reserved:
                        _log.warning("plugin.command_shadowed", plugin=name, command=command_name)
                    else:
                        self._commands[command_name] = command
        return self._commands

    def configure_logging(self, level: str | None) -> None:
        """Set up logs from `--log-level` or the `[log]` settings (defaults if unreadable)."""
        try:
            log = self.settings.log
        except ConfigError:
            # Reported by the command that needs the settings; logs still need a set-up.
            log = LogSettings()
        configure_logging(level or log.level, log.format)


def cli_state(ctx: click.Context | None = None) -> CliState:
    """The shared state of the current `ore` invocation (created on first call)."""
    root = (ctx or click.get_current_context()).find_root()
    state = root.meta.get(_STATE_KEY)
    if state is None:
        state = CliState(root.params.get("config_path"))
        root.meta[_STATE_KEY] = state
        state.configure_logging(root.params.get("log_level"))
    return cast(CliState, state)


def nats_option(help: str) -> Callable[[_F], _F]:
    """The `--nats URL` option (parameter `nats_urls`, repeatable for a cluster)."""
    return click.option("--nats", "nats_urls", multiple=True, metavar="URL", help=help)


def nats_settings(
    base: NatsSettings, urls: Sequence[str], partitions: int | None = None
) -> NatsSettings:
    """The `[nats]` settings with `--nats` and `--partitions` applied, validated like them."""
    update: dict[str, object] = {}
    if urls:
        update["url"] = list(urls)
    if partitions is not None:
        update["partitions"] = partitions
    if not update:
        return base
    try:
        return NatsSettings.model_validate({**base.model_dump(), **update})
    except ValidationError as exc:
        error = exc.errors()[0]
        option = _OPTION_OF_KEY.get(str(error["loc"][0]), str(error["loc"][0]))
        raise click.BadParameter(validation_message(error["msg"]), param_hint=option) from None


def bus_config(nats: NatsSettings, files: FilesSettings | None = None) -> BusConfig:
    """The core's bus configuration (partitions, payload limit, store retry delays, the
    files bucket's size and retention)."""
    files = files or FilesSettings()
    return BusConfig(
        files_max_bytes=int(files.bucket_max_bytes or -1),
        files_retention=files.retention,
        files_sweep_every=files.sweep_every,
        files_link_base=files.link_base,
        files_link_secret=files.link_secret.get_secret_value() if files.link_secret else "",
        files_link_ttl=files.link_ttl,
        partitions=nats.partitions,
        max_payload=int(nats.max_payload),
        replicas=nats.replicas,
        retry_delay=nats.retry_delay,
        retry_delay_max=nats.retry_delay_max,
        lease_ttl=nats.lease_ttl,
    )


async def connect_conduit(
    name: str, nats: NatsSettings, connect_timeout: float, files: FilesSettings | None = None
) -> ConduitClient:
    """A ConduitClient for conduit `name` with the `[nats]` credentials and TLS settings.

    Its namespace is `nats.namespace` (default: `name`) and `nats.secret` keys its
    message ids: what `ore auth` writes into the conduit's settings file. `files` (the
    operator's `[files]`) is the policy its uploads are checked against before a byte
    is sent (the core checks every message again).
    """
    servers = list(nats.url or [])
    try:
        async with asyncio.timeout(connect_timeout):
            client = await ConduitClient.connect(
                servers,
                name=name,
                namespace=nats.namespace,
                secret=nats.secret.get_secret_value() if nats.secret else None,
                prefix=nats.subject_prefix,
                credentials=NatsCredentials.from_settings(nats),
            )
    except TimeoutError:
        raise BusError(
            f"conduit {name}: cannot reach NATS at {', '.join(servers)} within "
            f"{connect_timeout:g}s; is the server running, and are --nats / nats.url right?"
        ) from None
    if files is not None:
        client.files.policy = FilePolicy.from_settings(files)
    return client


def table_columns(rows: Sequence[tuple[str, ...]]) -> list[str]:
    """Rows as aligned text columns (the last column is not padded)."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    return [
        "  ".join([*(cell.ljust(width) for cell, width in zip(row, widths, strict=False)), row[-1]])
        for row in rows
    ]
