"""`ore conduit NAME`: run one installed conduit as a process of its own until SIGTERM.

The conduit class comes from the plugins' registrations (`ore_register_conduits`),
its settings from the `[plugins.NAME]` table (with `--set` overrides on top),
validated by the class's `load_config`. It connects to the NATS that `ore serve`
uses (`nats.*` settings: URL, credentials, TLS, subject prefix), or, with no URL
configured, the one the running `ore serve` recorded; while disconnected from that
one it looks at the record again, so it follows a restarted `ore serve` to whatever
port it got. A conduit never starts a server of its own: with no URL found, or none
reachable, it fails with one line and exit status 1. SIGTERM or SIGINT cancels the
conduit, closes the connection and exits 0. `ore conduit --list` shows what is installed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

import click
import structlog
from pydantic import BaseModel

from ore_core import tracing
from ore_core.bus.ops.health import HealthServer
from ore_core.cli.capabilities import capability_rows, conduits_page
from ore_core.cli.checkout import checkout_conduits, checkout_root
from ore_core.cli.options import (
    cli_state,
    connect_conduit,
    nats_option,
    nats_settings,
    table_columns,
)
from ore_core.cli.packages import canonical
from ore_core.cli.running import find_running
from ore_core.conduit import ConduitClient
from ore_core.conduit.counters import CONTENT_TYPE
from ore_core.conduit.counters import render as render_metrics
from ore_core.config import FilesSettings, NatsSettings, OreSettings
from ore_core.endpoint import KeyForm
from ore_core.errors import OreError
from ore_core.plugins.manager import BUILTIN_PLUGINS, OrePluginManager, plugin_callers
from ore_core.plugins.registry import collect_registrations

__all__ = ["conduit", "parse_overrides", "setting_flags"]

log = structlog.get_logger("ore.conduit")

RECORD_POLL_INTERVAL = 0.5
"""Seconds between looks at the serve record while disconnected from the recorded serve."""


class _ConduitCommand(click.Command):
    """`ore conduit NAME --help` shows NAME's own settings after the command's help.

    The help option is not eager, so that NAME (typed before it) is known when it runs.
    """

    def get_help_option(self, ctx: click.Context) -> click.Option | None:
        names = self.get_help_option_names(ctx)
        if not names or not self.add_help_option:
            return None
        return click.Option(
            names,
            is_flag=True,
            expose_value=False,
            is_eager=False,
            callback=_help,
            help="Show this message (with NAME: that conduit's settings too) and exit.",
        )


def _help(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    click.echo(ctx.get_help())
    name = ctx.params.get("name")
    if name:
        click.echo("\n" + _settings_help(str(name)))
    ctx.exit()


def _settings_help(name: str) -> str:
    """The keys of `[plugins.NAME]`: default and what each is for (the model's docs)."""
    state = cli_state()
    conduit_class = collect_registrations(state.plugin_manager, state.settings).conduit(name)
    model = getattr(conduit_class, "config_model", None)
    fields = getattr(model, "model_fields", {})
    if not fields:
        return f"Conduit {name} has no settings."
    lines = [f"Settings of conduit {name} ([plugins.{name}] in ore.toml, or --set KEY=VALUE):"]
    for key, field in fields.items():
        value = None if field.is_required() else field.get_default(call_default_factory=True)
        default = "" if value is None else f" (default: {value!s})"
        lines.append(f"  {key}{default}")
        for line in (field.description or "").splitlines():
            lines.append(f"      {line.strip()}")
    return "\n".join(lines)


@click.command(
    cls=_ConduitCommand,
    context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
)
@click.argument("name", required=False)
@click.option("--list", "list_only", is_flag=True, help="List the installed conduits.")
@click.option(
    "--all",
    "list_all",
    is_flag=True,
    help="With --list: also the conduits of the checkout ore was installed from, with "
    "the line that installs each.",
)
@click.option(
    "--capabilities",
    "list_capabilities",
    is_flag=True,
    help="With --list: what each conduit's platform can do (edit, threads, streaming, ...).",
)
@click.option(
    "--markdown",
    is_flag=True,
    help="With --list --capabilities: the page docs/conduits.md, for the conduits of the "
    "checkout ore was installed from.",
)
@click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="KEY=VALUE",
    help="Set a key of [plugins.NAME] for this run; repeatable. Dotted keys reach nested "
    "tables; a value starting with [ or { is read as JSON.",
)
@nats_option(help="NATS server URL; repeat for a cluster (default: nats.url).")
@click.option(
    "--connect-timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=10.0,
    show_default=True,
    help="Seconds to keep trying to reach NATS before giving up.",
)
@click.option(
    "--health-port",
    type=click.IntRange(0, 65535),
    default=None,
    help="Serve /healthz, /readyz and /metrics (Prometheus) on 127.0.0.1:PORT.",
)
@click.pass_context
def conduit(
    ctx: click.Context,
    name: str | None,
    list_only: bool,
    list_all: bool,
    list_capabilities: bool,
    markdown: bool,
    overrides: tuple[str, ...],
    nats_urls: tuple[str, ...],
    connect_timeout: float,
    health_port: int | None,
) -> None:
    """Run the installed conduit NAME against the NATS of `ore serve`, until SIGTERM.

    Each top-level setting of NAME is also an option: `ore conduit web --port 9000` is
    `--set port=9000`.
    """
    state = cli_state()
    if list_only and list_capabilities:
        _list_capabilities(state.plugin_manager, state.settings, markdown)
        return
    if list_only:
        _list_conduits(state.plugin_manager, state.settings)
        if list_all:
            _list_checkout(collect_registrations(state.plugin_manager, state.settings).conduits)
        return
    if name is None:
        raise click.UsageError("name the conduit to run (`ore conduit --list` shows them)")
    settings = state.settings
    conduit_class = collect_registrations(state.plugin_manager, settings).conduit(name)
    section = settings.plugin_config(name)
    flags = setting_flags(ctx.args, getattr(conduit_class, "config_model", None), name)
    for key, value in [*parse_overrides(overrides), *flags]:
        _assign(section, key, value)
    load = getattr(conduit_class, "load_config", None)
    config = load(section) if callable(load) else section
    check = getattr(config, "check_secrets", None)
    if callable(check):
        check()  # a missing or malformed token: one line, nothing started
    nats = nats_settings(settings.nats, nats_urls)
    if not nats.url:
        running = find_running()
        if running is None:
            raise OreError(
                f"conduit {name}: no NATS server configured and no running `ore serve` "
                "recorded; start `ore serve`, or pass --nats URL / set nats.url "
                "(ORE_NATS__URL) to the server it uses (a conduit never starts its own)"
            )
        click.echo(f"conduit {name}: using {running.describe()}", err=True)
        nats = nats_settings(nats, [running.nats_url])
        follow = True
    else:
        follow = False  # a URL given is the user's: kept whatever the records say
    tracing.configure(f"ore-conduit-{name}")  # on only when OTEL_EXPORTER_OTLP_*ENDPOINT is set
    try:
        serving = _serve(
            conduit_class, config, nats, connect_timeout, health_port, follow, settings.files
        )
        asyncio.run(serving)
    finally:
        tracing.shutdown()  # export the spans still pending


def setting_flags(
    args: Sequence[str], model: type[BaseModel] | None, name: str
) -> list[tuple[list[str], Any]]:
    """`--key VALUE` / `--key=VALUE` for top-level settings of the conduit's model, as
    (key path, value); anything else is a usage error that names the settings."""
    fields = set(model.model_fields) if model is not None else set()
    parsed: list[tuple[list[str], Any]] = []
    rest = list(args)
    while rest:
        arg = rest.pop(0)
        flag, sep, value = arg.partition("=")
        key = flag.removeprefix("--").replace("-", "_")
        if not flag.startswith("--") or key not in fields:
            known = ", ".join(f"--{field.replace('_', '-')}" for field in sorted(fields))
            raise click.UsageError(
                f"unknown option {flag!r} for conduit {name}"
                + (f" (its settings: {known})" if known else " (it has no settings)")
            )
        if not sep:
            if not rest:
                raise click.UsageError(f"option {flag!r} of conduit {name} needs a value")
            value = rest.pop(0)
        parsed.append(([key], _value(arg, value)))
    return parsed


def parse_overrides(overrides: Sequence[str]) -> list[tuple[list[str], Any]]:
    """`KEY=VALUE` options as (key path, value); values are strings unless JSON `[`/`{`."""
    parsed = []
    for override in overrides:
        key, sep, value = override.partition("=")
        path = key.strip().split(".")
        if not sep or not all(path):
            raise click.BadParameter(f"{override!r} is not KEY=VALUE", param_hint="--set")
        parsed.append((path, _value(override, value)))
    return parsed


def _value(override: str, text: str) -> Any:
    if not text.lstrip().startswith(("[", "{")):
        return text  # the config model converts "5" or "true" where it expects a number
    try:
        return json.loads(text)
    except ValueError as exc:
        raise click.BadParameter(f"{override!r}: invalid JSON: {exc}", param_hint="--set")


def _assign(section: dict[str, Any], path: list[str], value: Any) -> None:
    """Set `section[a][b]... = value` for the path `a.b...`, copying tables on the way."""
    table = section
    for part in path[:-1]:
        nested = table.get(part)
        table[part] = dict(nested) if isinstance(nested, Mapping) else {}
        table = table[part]
    table[path[-1]] = value


async def _serve(
    conduit_class: type[Any],
    config: Any,
    nats: NatsSettings,
    connect_timeout: float,
    health_port: int | None = None,
    follow: bool = False,
    files: FilesSettings | None = None,
) -> None:
    """Connect, run the conduit until a signal cancels it, then close the connection.

    `follow`: the URL came from the serve record; reconnects follow the record. `files`:
    the operator's `[files]` rules the conduit checks files against."""
    task = asyncio.current_task()
    assert task is not None
    loop = asyncio.get_running_loop()
    signals: list[signal.Signals] = []

    def on_signal(signum: signal.Signals) -> None:
        log.info("stopping" if not signals else "stopping now", signal=signum.name)
        signals.append(signum)
        task.cancel()

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, on_signal, signum)
    try:
        client = await connect_conduit(conduit_class.name, nats, connect_timeout, files)
        async with client, _health(client, health_port), _following(client, follow):
            log.info("conduit connected to NATS", conduit=conduit_class.name, servers=nats.url)
            await conduit_class().run(client, config)
    except asyncio.CancelledError:
        if not signals:
            raise
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)


@asynccontextmanager
async def _following(client: ConduitClient, follow: bool) -> AsyncIterator[None]:
    """While the conduit runs (with `follow`), `_follow_serve_record` in the background."""
    if not follow:
        yield
        return
    task = asyncio.create_task(_follow_serve_record(client), name="follow-serve-record")
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _follow_serve_record(client: ConduitClient) -> None:
    """Point the reconnects of a disconnected conduit at the URL the running `ore serve`
    recorded: a restarted serve may listen elsewhere (its old port taken), and retrying
    the old URL would never find it."""
    nc = client.nc
    while True:
        await asyncio.sleep(RECORD_POLL_INTERVAL)
        if nc.is_connected or nc.is_closed:
            continue
        running = await asyncio.to_thread(find_running)
        if running is None or running.nats_url in [url.geturl() for url in nc.servers]:
            continue
        log.info("ore serve is recorded elsewhere now: reconnecting there", url=running.nats_url)
        nc.set_server_pool([running.nats_url])


@asynccontextmanager
async def _health(client: ConduitClient, port: int | None) -> AsyncIterator[None]:
    """The conduit's health endpoint and metrics on `port` while it runs (None: none)."""
    if port is None:
        yield
        return

    def unconnected() -> str | None:
        return None if client.nc.is_connected else "not connected to NATS"

    server = HealthServer(
        unconnected, unconnected, port=port, metrics=(render_metrics, CONTENT_TYPE)
    )
    await server.start()
    click.echo(f"health: http://127.0.0.1:{server.port}/healthz; metrics: /metrics")
    try:
        yield
    finally:
        await server.stop()


def _list_conduits(plugins: OrePluginManager, settings: OreSettings) -> None:
    """One row per installed conduit: name, distribution, description."""
    classes = collect_registrations(plugins, settings).conduits
    if not classes:
        click.echo("No conduits installed (from a checkout: `ore install ./conduits/nats`).")
        return
    owners = _owners(plugins)
    rows = [("NAME", "DISTRIBUTION", "ENDPOINT", "DESCRIPTION")]
    for name, cls in sorted(classes.items()):
        distribution = _distribution(plugins, owners.get(cls))
        rows.append((name, distribution, _endpoint_form(name, cls), _description(cls)))
    click.echo("\n".join(table_columns(rows)))


def _list_capabilities(plugins: OrePluginManager, settings: OreSettings, markdown: bool) -> None:
    """The capability matrix of the installed conduits, or (`markdown`) docs/conduits.md."""
    classes = collect_registrations(plugins, settings).conduits
    if not markdown:
        click.echo("\n".join(table_columns(capability_rows(classes))))
        return
    root = checkout_root()
    if root is None:
        raise OreError(
            "--markdown documents the conduits of a checkout of ore; ore was not installed from one"
        )
    owners = _owners(plugins)
    by_distribution = {
        canonical(_distribution(plugins, owners.get(cls)).split(" ")[0]): (name, cls)
        for name, cls in classes.items()
    }
    page: dict[str, type[Any]] = {}
    for found in checkout_conduits(root):
        if canonical(found.distribution) not in by_distribution:
            raise OreError(
                f"conduit {found.name} of the checkout is not installed: {found.install_line}, "
                "then run this again"
            )
        name, cls = by_distribution[canonical(found.distribution)]
        page[name] = cls
    click.echo(conduits_page(page), nl=False)


def _endpoint_form(name: str, cls: type[Any]) -> str:
    """How an endpoint of the conduit is typed (`slack:ENTERPRISE:TEAM:CHANNEL:THREAD_TS`)."""
    key = getattr(cls, "conversation_key", "")
    form = getattr(cls, "key_form", None)
    if not key:
        return f"{name}:{name}.KEY=VALUE"
    return f"{name}:{form.spelling if isinstance(form, KeyForm) else 'VALUE'}"


def _list_checkout(installed: Mapping[str, type[Any]]) -> None:
    """The conduits of the checkout ore came from, installed or not, with install lines."""
    root = checkout_root()
    if root is None:
        click.echo("\nore was not installed from a checkout: no other conduits to list.")
        return
    rows = [("NAME", "INSTALLED", "INSTALL")]
    for found in checkout_conduits(root):
        rows.append((found.name, "yes" if found.name in installed else "no", found.install_line))
    click.echo(f"\nConduits of the checkout at {root}:")
    click.echo("\n".join(table_columns(rows)))


def _owners(plugins: OrePluginManager) -> dict[type[Any], str]:
    """Conduit class -> the plugin that registered it (asked once more, plugin by plugin)."""
    owners: dict[type[Any], str] = {}
    for plugin, caller in plugin_callers(plugins, "ore_register_conduits"):
        caller(register=lambda cls, plugin=plugin: owners.setdefault(cls, plugin))
    return owners


def _distribution(plugins: OrePluginManager, plugin: str | None) -> str:
    dist = plugins.distribution(plugin) if plugin else None
    if dist is not None:
        return f"{dist.metadata['Name']} {dist.version}"
    return "ore-core (built in)" if plugin in BUILTIN_PLUGINS else "-"


def _description(cls: type[Any]) -> str:
    text = getattr(cls, "description", "") or (cls.__doc__ or "").strip()
    return text.splitlines()[0] if text else ""
