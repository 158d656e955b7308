"""`ore doctor`: what ore would do here, and what to do about each problem.

One check per part a new user trips over, each a line `ok` / `warn` / `FAIL` with
what was found and, for a problem, what to do: the config and its files, the state
directory, the store and its health, the processor that would answer (its settings
validated as `ore serve` would, and its model server asked, `GET /models`), the
plugins (loaded, failed, and configured but not installed), the configured NATS
server (does it let ore's user in), the running core and whether its NATS answers,
and what killed chats left behind. It changes nothing; the exit status is 1 when a check failed.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

import click

from ore_core._nats.connection import NatsCredentials, connect_nats
from ore_core.bus.server.durability import SyncPolicy
from ore_core.bus.server.embedded import data_dir_holder, default_store_dir
from ore_core.cli.app import deployment_durability, opened_processor
from ore_core.cli.control_store import open_threads
from ore_core.cli.failures import one_line
from ore_core.cli.options import CliState, cli_state
from ore_core.cli.processor import choose_processor, turn_processors
from ore_core.cli.running import find_running, leftover_chat_servers, state_dir, store_key
from ore_core.cli.threads import served_store_section
from ore_core.config import (
    CONFIG_ENV,
    ConfigError,
    NatsSettings,
    OreSettings,
    default_config_path,
    resolve_config_path,
)
from ore_core.plugins.registry import collect_registrations

__all__ = ["Check", "doctor"]

Status = Literal["ok", "warn", "FAIL"]

PROCESSOR_CHECK_TIMEOUT = 8.0
"""Seconds the processor may take to say whether it can answer (a model server's /models)."""
NATS_CHECK_TIMEOUT = 3.0
"""Seconds the configured NATS server may take to let ore's user in."""


@dataclass(frozen=True, slots=True)
class Check:
    """One finding: which part, how it is, what was found, what to do (for a problem)."""

    part: str
    status: Status
    found: str
    todo: str = ""


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def doctor(as_json: bool) -> None:
    """Check the config, state directory, store, processor, plugins and running core."""
    checks = _checks(cli_state())
    if as_json:
        click.echo(json.dumps([asdict(check) for check in checks], indent=2))
    else:
        width = max(len(check.part) for check in checks)
        for check in checks:
            click.echo(f"{check.status:<4}  {check.part:<{width}}  {check.found}")
            if check.todo:
                click.echo(f"{'':<4}  {'':<{width}}  -> {check.todo}")
    if any(check.status == "FAIL" for check in checks):
        click.get_current_context().exit(1)


def _checks(state: CliState) -> list[Check]:
    config = _config()
    try:
        settings = state.settings
    except ConfigError as exc:
        return [config, Check("settings", "FAIL", str(exc), "fix the value it names")]
    checks = [config, Check("settings", "ok", _overrides(state))]
    checks.append(_state_dir())
    checks.append(_store(state))
    checks.append(_processor(state))
    checks += _plugins(state)
    checks.append(_durability(settings.nats))
    if settings.nats.url:
        checks.append(_nats(settings.nats))
    checks.append(_running(store_key(settings)))
    checks.append(_leftovers())
    checks.append(_orphan())
    return checks


def _config() -> Check:
    named = os.environ.get(CONFIG_ENV)
    try:
        path = resolve_config_path()
    except ConfigError as exc:
        return Check("config file", "FAIL", str(exc), f"create it, or unset {CONFIG_ENV}")
    if path is None:
        return Check(
            "config file",
            "ok",
            f"none (defaults and ORE_* variables); it would be {default_config_path()}",
        )
    how = f" (named by {CONFIG_ENV})" if named else ""
    return Check("config file", "ok", f"{path}{how}")


def _overrides(state: CliState) -> str:
    values = state.settings.describe_sources()
    changed = [value for value in values if value.source != "default"]
    if not changed:
        return "all defaults (`ore config` lists every value and its source)"
    keys = ", ".join(sorted(value.key for value in changed))
    return f"{len(changed)} set: {keys} (`ore config` shows where each came from)"


def _state_dir() -> Check:
    directory = state_dir()
    try:
        directory.mkdir(parents=True, exist_ok=True)
        probe = directory / f".doctor-{os.getpid()}"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        return Check(
            "state directory", "FAIL", one_line(exc), "set XDG_STATE_HOME to a writable one"
        )
    return Check("state directory", "ok", f"{directory} (writable)")


def _store(state: CliState) -> Check:
    section = served_store_section()

    async def count() -> tuple[str, int]:
        store = await open_threads(state.settings, state.plugin_manager, section)
        try:
            ids = await store.list_ids()
            return str(getattr(store, "location", store.name)), len(ids)
        finally:
            await store.close()

    try:
        location, threads = asyncio.run(count())
    except Exception as exc:
        return Check(
            "store",
            "FAIL",
            f"{section['name']}: {one_line(exc)}",
            "fix store.name / store.path (`ore config`), or the file's permissions",
        )
    return Check("store", "ok", f"{location}: {threads} thread(s) readable")


def _processor(state: CliState) -> Check:
    names = turn_processors(state.plugin_manager)
    choice = choose_processor(state.settings, names, os.environ)
    name = choice.settings.processor.name
    if name not in names:
        return Check(
            "processor",
            "FAIL",
            f"processor.name is {name!r}, which no installed plugin provides ({', '.join(names)})",
            "install the plugin that provides it (`ore install ...`), or set processor.name",
        )
    if choice.echo_reason is not None:
        return Check("processor", "warn", f"echo answers: {choice.echo_reason}")
    model = choice.settings.processor.model_dump().get("model")
    detail = f" model {model}" if model else ""
    try:
        asyncio.run(_try_processor(state, choice.settings))
    except Exception as exc:
        return Check(
            "processor",
            "FAIL",
            f"{name}{detail} ({choice.source}): {one_line(exc)}",
            "fix the [processor] section (`ore config`) or the model server it names",
        )
    return Check("processor", "ok", f"{name}{detail} ({choice.source})")


async def _try_processor(state: CliState, settings: OreSettings) -> None:
    """Build the processor as `ore serve` would and let it check that it can answer
    (`check()`: the openai one asks the model server)."""
    async with opened_processor(state.plugin_manager, settings) as processor:
        check = getattr(processor, "check", None)
        if callable(check):
            async with asyncio.timeout(PROCESSOR_CHECK_TIMEOUT):
                await check()


def _plugins(state: CliState) -> list[Check]:
    manager = state.plugin_manager
    loaded = [info.name for info in manager.describe()]
    checks = [
        Check("plugins", "ok", f"loaded: {', '.join(loaded)}" if loaded else "none installed")
    ]
    known = {name for name, _ in manager.list_name_plugin()}
    known |= set(collect_registrations(manager, state.settings).conduits)
    for name in sorted(set(state.settings.plugins) - known):
        checks.append(
            Check(
                f"plugin {name}",
                "FAIL",
                f"[plugins.{name}] is configured, but no installed plugin or conduit is named "
                f"{name!r}",
                f"install it (`ore install ...`; `ore plugins` lists what is installed), or "
                f"remove the [plugins.{name}] table",
            )
        )
    for failure in manager.load_errors:
        dist = failure.distribution
        checks.append(
            Check(
                f"plugin {failure.name}",
                "warn",
                f"left out ({dist}): {failure.error}",
                f"fix or reinstall {dist}, or `ore uninstall {dist}`",
            )
        )
    return checks


def _running(our_store: str) -> Check:
    running = find_running()
    if running is None:
        return Check(
            "running core",
            "ok",
            "none recorded (`ore chat` starts its own; `ore serve` runs a shared one)",
        )
    if not _answers(running.nats_url):
        return Check(
            "running core",
            "FAIL",
            f"{running.describe()}, but nothing answers at {running.nats_url}",
            f"stop process {running.pid} and start `ore serve` again",
        )
    same = " (the configured store)" if running.store == our_store else ""
    return Check("running core", "ok", f"{running.describe()}{same}; NATS answers")


def _durability(nats: NatsSettings) -> Check:
    """What an acknowledged message survives; a warning where a crash can lose it."""
    found = deployment_durability(nats)
    if nats.url and nats.replicas == 1:
        todo = (
            "give the server `sync_interval: always` in its jetstream block, or run a "
            "3-node cluster with nats.replicas = 3 (`ore migrate`); docs/operating-nats.md"
        )
        return Check("durability", "warn", found, todo)
    if not nats.url and not SyncPolicy(nats.sync).always:
        todo = 'set nats.sync = "always" unless losing that window is fine'
        return Check("durability", "warn", found, todo)
    return Check("durability", "ok", found)


def _nats(nats: NatsSettings) -> Check:
    """The configured NATS server: does it let ore's user in (with the [nats] credentials)?"""
    servers = list(nats.url or [])
    where = ", ".join(servers)

    async def connect() -> None:
        async with asyncio.timeout(NATS_CHECK_TIMEOUT):
            nc = await connect_nats(
                servers,
                **NatsCredentials.from_settings(nats).connect_options(),
                max_reconnect_attempts=-1,
                reconnect_time_wait=0.2,
            )
        await nc.close()

    try:
        asyncio.run(connect())
    except TimeoutError:
        return Check(
            "nats",
            "FAIL",
            f"nothing answers at {where} (nats.url) within {NATS_CHECK_TIMEOUT:g}s",
            "start the server, or fix nats.url / ORE_NATS__URL (`ore config`)",
        )
    except Exception as exc:
        return Check("nats", "FAIL", one_line(exc), "fix the [nats] settings (`ore config`)")
    return Check("nats", "ok", f"{where} (nats.url) lets ore's user in")


def _answers(url: str) -> bool:
    parts = urlsplit(url)
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 4222), 3):
            return True
    except OSError:
        return False


def _orphan() -> Check:
    directory = default_store_dir()
    holder = data_dir_holder(directory)
    if holder is None or not holder.orphaned:
        return Check("embedded NATS", "ok", "no orphaned nats-server")
    return Check(
        "embedded NATS",
        "warn",
        f"nats-server (pid {holder.server}) still runs on {directory}, but the `ore serve` "
        f"that started it (pid {holder.owner}) is gone",
        f"the next `ore serve` stops it; or stop it now: kill {holder.server}",
    )


def _leftovers() -> Check:
    left = leftover_chat_servers()
    if not left:
        return Check("killed chats", "ok", "nothing left behind")
    directories = ", ".join(str(Path(entry.directory)) for entry in left)
    return Check(
        "killed chats",
        "warn",
        f"{len(left)} nats-server(s) of killed chats left: {directories}",
        "the next `ore chat` removes them",
    )
