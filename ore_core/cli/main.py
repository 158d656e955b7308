"""The `ore` command line: global options, plugin management and `ore config`.

More commands join `main` in three ways, none of which edits this module's body:
- a module of the core (`ore_core/cli/threads.py` defining a click command `threads`)
  is named in `LAZY_COMMANDS` and imported only when that command is used;
- a plugin implements `ore_register_commands(cli)`;
- code that imports `main` may call `main.add_command(...)`.

Every command reaches the settings and the plugin manager of this invocation
through `cli_state()` (`ore_core.cli.options`); both are built on first use, once
per invocation.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

import click
import structlog

from ore_core.cli.failures import DEBUG_ENV, debug_requested, one_line
from ore_core.cli.options import cli_state, table_columns
from ore_core.cli.processor import choose_processor, turn_processors
from ore_core.config import ConfigValue
from ore_core.errors import OreError
from ore_core.plugins.manager import PluginError
from ore_core.plugins.registry import Registrations, collect_registrations

__all__ = ["LAZY_COMMANDS", "OreGroup", "main"]

LAZY_COMMANDS: dict[str, str] = {
    "auth": "ore_core.cli.auth:auth",
    "chat": "ore_core.cli.chat:chat",
    "conduit": "ore_core.cli.conduit:conduit",
    "doctor": "ore_core.cli.doctor:doctor",
    "files": "ore_core.cli.files:files",
    "link": "ore_core.cli.link:link",
    "migrate": "ore_core.cli.migrate:migrate",
    "models": "ore_core.cli.models:models",
    "new": "ore_core.cli.new:new",
    "send": "ore_core.cli.send:send",
    "serve": "ore_core.cli.serve:serve",
    "threads": "ore_core.cli.threads:threads",
    "top": "ore_core.cli.top:top",
}
"""Command name -> `"module:attribute"` of a click command, imported when first used."""

_LEVELS = ["debug", "info", "warning", "error", "critical"]
_log = structlog.get_logger("ore.cli")


class OreGroup(click.Group):
    """A click group that also finds lazy core commands and plugin commands.

    Built-in commands win over plugin commands of the same name. Any error a command
    raises becomes a one-line `Error: ...` saying what to do, and exit status 1;
    `--debug` or `ORE_DEBUG=1` shows the traceback instead.
    """

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self._core_names(), *self._plugin_commands(ctx)})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        if command is None and cmd_name in LAZY_COMMANDS:
            module_name, _, attribute = LAZY_COMMANDS[cmd_name].partition(":")
            command = getattr(importlib.import_module(module_name), attribute)
        if command is None:
            command = self._plugin_commands(ctx).get(cmd_name)
        return command

    def _core_names(self) -> set[str]:
        return {*self.commands, *LAZY_COMMANDS}

    def _plugin_commands(self, ctx: click.Context) -> dict[str, click.Command]:
        return cli_state(ctx).plugin_commands(reserved=self._core_names())

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        """`--debug` is the group's wherever it is typed (`ore serve --debug` too), up to
        a `--` that ends the options."""
        end = args.index("--") if "--" in args else len(args)
        if "--debug" in args[:end]:
            options = [arg for arg in args[:end] if arg != "--debug"]
            args = ["--debug", *options, *args[end:]]
        return super().parse_args(ctx, args)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.Abort, click.exceptions.Exit):
            raise
        except Exception as exc:
            if debug_requested(bool(ctx.params.get("debug"))):
                raise
            raise click.ClickException(one_line(exc)) from exc


@click.group(cls=OreGroup)
@click.version_option(package_name="ore-core", prog_name="ore")
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Config file (default: $ORE_CONFIG, else ore.toml in the user config directory).",
)
@click.option(
    "--log-level",
    type=click.Choice(_LEVELS, case_sensitive=False),
    help="Log level (default: [log] level in the config, else info).",
)
@click.option(
    "--debug",
    is_flag=True,
    help=f"Show the traceback of an error instead of one line (or set {DEBUG_ENV}=1).",
)
@click.pass_context
def main(ctx: click.Context, config_path: Path | None, log_level: str | None, debug: bool) -> None:
    """ore: a message-bus plugin framework for conversational agents."""
    cli_state(ctx)


@main.command()
@click.option("--all", "include_all", is_flag=True, help="Include the built-in plugins.")
@click.option("--hooks", is_flag=True, help="List each hook with its plugins, in call order.")
@click.option(
    "--available", is_flag=True, help="List the plugins and conduits you can install instead."
)
@click.option("--markdown", is_flag=True, help="With --available: the page docs/plugins.md.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def plugins(include_all: bool, hooks: bool, available: bool, markdown: bool, as_json: bool) -> None:
    """Show installed plugins: distribution, version, hooks and load errors."""
    if available:
        _available(markdown, as_json)
        return
    manager = cli_state().plugin_manager
    if hooks:
        table = manager.hook_implementers(include_builtins=include_all)
        lines = [f"{hook}: {', '.join(names) or '-'}" for hook, names in table.items()]
        click.echo(json.dumps(table, indent=2) if as_json else "\n".join(lines))
        return
    entries = [
        {**asdict(info), "error": None} for info in manager.describe(include_builtins=include_all)
    ]
    entries += [
        {**asdict(failure), "hooks": [], "builtin": False} for failure in manager.load_errors
    ]
    if as_json:
        click.echo(json.dumps(entries, indent=2))
        return
    for entry in entries:
        origin = " ".join(filter(None, [entry["distribution"], entry["version"]]))
        click.echo(f"{entry['name']} ({origin or 'registered in code'})")
        if entry["error"]:
            click.echo(f"  error: {entry['error']}")
        else:
            click.echo(f"  hooks: {', '.join(entry['hooks']) or '-'}")


def _available(markdown: bool, as_json: bool) -> None:
    """The plugin directory: a table, the Markdown page, or JSON."""
    from ore_core.cli.directory import directory_page, listings

    entries = listings()
    if markdown:
        click.echo(directory_page(entries), nl=False)
    elif as_json:
        click.echo(json.dumps([entry.model_dump() for entry in entries], indent=2))
    else:
        rows = [("NAME", "KIND", "INSTALL", "ADDS")]
        rows += [(entry.name, entry.kind, entry.install, entry.adds) for entry in entries]
        click.echo("\n".join(table_columns(rows)))


@main.command()
@click.argument("packages", nargs=-1)
@click.option("-U", "--upgrade", is_flag=True, help="Upgrade packages that are installed.")
@click.option(
    "-e", "--editable", multiple=True, help="Install a project from a local path, editable."
)
@click.option("-v", "--verbose", is_flag=True, help="Show pip's whole log as it runs.")
def install(
    packages: tuple[str, ...], upgrade: bool, editable: tuple[str, ...], verbose: bool
) -> None:
    """Install plugin packages into the Python environment ore runs in.

    Prints one progress line and pip's summary; pip's whole log only when it fails (or
    with -v).
    """
    if not packages and not editable:
        raise click.UsageError("name at least one package (or -e PATH)")
    args = ["--upgrade"] if upgrade else []
    args += [arg for path in editable for arg in ("--editable", path)]
    if verbose:
        _pip("install", *args, *packages)
    names = ", ".join([*packages, *editable])
    click.echo(f"Installing {names} with pip ...")
    completed = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--progress-bar", "off", *args, *packages],
        check=False,
        capture_output=True,
        text=True,
    )
    if completed.returncode != 0:
        sys.stderr.write(completed.stdout + completed.stderr)
        raise click.ClickException(f"pip could not install {names} (its log is above)")
    done = [line for line in completed.stdout.splitlines() if line.startswith("Successfully ")]
    click.echo(done[-1] if done else f"{names}: installed already, nothing to do")


@main.command()
@click.argument("packages", nargs=-1, required=True)
@click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation.")
def uninstall(packages: tuple[str, ...], yes: bool) -> None:
    """Uninstall plugin packages from the Python environment ore runs in (a conduit's
    or plugin's short name finds its package: `telegram` is ore-conduit-telegram).

    ore-core and its own dependencies are refused, and so are names that are not
    installed. Without -y it asks first, which needs a terminal.
    """
    from ore_core.cli.packages import installed_name, refusals

    packages = tuple(installed_name(package) for package in packages)
    reasons = refusals(packages)
    if reasons:
        raise click.ClickException("; ".join(reasons))
    if not yes:
        if not sys.stdin.isatty():
            raise click.ClickException(
                f"ore uninstall asks before removing {', '.join(packages)}, but there is no "
                "terminal to answer: add -y"
            )
        click.confirm(f"Uninstall {', '.join(packages)}?", abort=True)
    _pip("uninstall", "--yes", *packages)


@main.command("config")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def config_command(as_json: bool) -> None:
    """Show the effective configuration and where each value came from (secrets hidden)."""
    state = cli_state()
    values = state.settings.describe_sources()
    # The processor as `ore serve` and `ore chat` will choose it, not only as written.
    choice = choose_processor(state.settings, turn_processors(state.plugin_manager), os.environ)
    values = [
        ConfigValue(value.key, choice.settings.processor.name, choice.source)
        if value.key == "processor.name" and choice.source.startswith("auto")
        else value
        for value in values
    ]
    # What plugins' interceptors enforce, defaults included (the guard's limits); a
    # plugin that fails to register is `ore plugins`' to report, not a reason to fail here.
    try:
        described = collect_registrations(state.plugin_manager, state.settings)
    except OreError:
        described = Registrations()
    _check_store_keys(described, state.settings.store.model_dump())
    values += [
        ConfigValue(f"plugins.{name}", text, "effective")
        for name, text in described.interceptor_descriptions().items()
    ]
    if as_json:
        click.echo(json.dumps([asdict(value) for value in values], indent=2))
        return
    rows = [("KEY", "VALUE", "SOURCE")]
    rows += [(value.key, _text(value.value), value.source) for value in values]
    click.echo("\n".join(table_columns(rows)))


def _check_store_keys(registrations: Registrations, section: dict[str, Any]) -> None:
    """Raise the store factory's ConfigError for a key of `[store]` it does not take,
    as `ore doctor` and `ore serve` would (a factory builds the store without opening
    it); a store no plugin offers is `ore plugins`' to report."""
    try:
        factory = registrations.store_factory(str(section["name"]))
    except PluginError:
        return
    factory(section)


def _pip(*args: str) -> None:
    """Run pip of this interpreter (so plugins land where ore can load them); exit with it."""
    completed = subprocess.run([sys.executable, "-m", "pip", *args], check=False)
    click.get_current_context().exit(completed.returncode)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)
