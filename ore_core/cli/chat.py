"""`ore chat`: talk to ore in the terminal (or pipe lines through it).

With no NATS URL configured (`--nats`, `nats.url`), one process runs everything: a
private nats-server (its JetStream data in a temporary directory, so chats never
share it with `ore serve` or with each other), the core (`build_runtime` and a
`CoreService`, with the configured store) and the stdin conduit; all three stop in
reverse order when the chat ends (Ctrl-D, end of input, SIGTERM, SIGHUP). With a NATS URL it
only runs the conduit against the `ore serve` listening there.

Unless `processor.name` is set, the chat uses the `openai` processor when the
ore-openai plugin is installed and an endpoint is given in the environment, and
otherwise echo, saying once how to configure a model. Logs go to `chat.log` in the
user state directory, never between the lines of the chat.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import tempfile
from collections.abc import Collection, Coroutine, Iterator, Mapping
from contextlib import AsyncExitStack, contextmanager
from pathlib import Path
from typing import Any

import click
import platformdirs
import pluggy

from ore_core.bus.embedded import EmbeddedNatsServer
from ore_core.bus.service import CoreService
from ore_core.cli.app import build_runtime
from ore_core.cli.options import (
    CliState,
    bus_config,
    cli_state,
    connect_conduit,
    nats_option,
    nats_settings,
)
from ore_core.conduit.base import Conduit, ConduitConfig
from ore_core.config import NatsSettings, OreSettings, ProcessorSettings
from ore_core.errors import InvalidThreadId, OreError
from ore_core.ids import validate_thread_id
from ore_core.logging import configure_logging
from ore_core.plugins.manager import plugin_callers
from ore_core.plugins.registry import Registrations, collect_registrations
from ore_core.subjects import Subjects

__all__ = ["ChatError", "chat", "choose_processor"]

CONDUIT = "stdin"
MODEL_PROCESSOR = "openai"
# The variables the ore-openai plugin reads (ore_openai.config); the core cannot import it.
MODEL_ENDPOINT_ENV = ("ORE_OPENAI_BASE_URL", "OPENAI_API_KEY")
CONNECT_TIMEOUT = 5.0
"""Seconds to reach a configured NATS server before giving up (nats-py would retry forever)."""
DRAIN_GRACE = 1.0
"""Seconds a running turn may finish when the chat ends; the user has already left."""
LOG_FILE = "chat.log"
_TERMINATING = (signal.SIGTERM, signal.SIGHUP)

_NO_MODEL = (
    "No model configured: ore answers with echo. To chat with a model, {install}"
    "export OPENAI_API_KEY=sk-... (or ORE_OPENAI_BASE_URL=http://localhost:11434/v1 "
    "for a local server such as Ollama)"
)
_INSTALL_MODEL = "pip install ./plugins/openai (the ore-openai plugin), then "
_INSTALL_CONDUIT = (
    "the stdin conduit is not installed: pip install ./conduits/stdin "
    "(the ore-conduit-stdin package), or allow it in ORE_LOAD_PLUGINS"
)


class ChatError(OreError):
    """`ore chat` cannot start; the message says what to install or configure."""


@click.command()
@click.option("--thread", "thread_id", metavar="ID", help="Continue this thread (created if new).")
@click.option("--new", "new_thread", is_flag=True, help="Start a new thread.")
@nats_option(
    help="NATS of a running `ore serve`; repeat for a cluster "
    "(default: nats.url, else everything runs in this process).",
)
def chat(thread_id: str | None, new_thread: bool, nats_urls: tuple[str, ...]) -> None:
    """Chat with ore in the terminal; on a pipe, answer each input line.

    Without --thread or --new, a terminal chat resumes the thread it used last and
    piped input starts a new thread.
    """
    if thread_id is not None and new_thread:
        raise click.UsageError("--thread and --new cannot be used together")
    if thread_id is not None:
        try:
            validate_thread_id(thread_id)
        except InvalidThreadId as exc:
            raise click.BadParameter(str(exc), param_hint="--thread") from None
    state = cli_state()
    overrides: dict[str, Any] = {}
    if thread_id is not None:
        overrides["thread"] = thread_id
    if new_thread:
        overrides["new"] = True
    with _logs_to_file(state):
        nats = nats_settings(state.settings.nats, nats_urls)
        settings = state.settings.model_copy(update={"nats": nats})
        run = _conduit_only if nats.url else _everything
        asyncio.run(_guarded(run(settings, state.plugin_manager, overrides)))


@contextmanager
def _logs_to_file(state: CliState) -> Iterator[None]:
    """Send ore's and the libraries' logs to `chat.log` while the chat runs.

    stderr belongs to the chat; afterwards logging is as `ore` set it up.
    """
    root = click.get_current_context().find_root()
    level = root.params.get("log_level")
    path = Path(platformdirs.user_state_dir("ore")) / LOG_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    libraries = logging.getLogger()  # nats-py and asyncio log through the standard library
    with path.open("a", encoding="utf-8", buffering=1) as stream:
        handler = logging.StreamHandler(stream)
        configure_logging(
            level or state.settings.log.level, state.settings.log.format, stream=stream
        )
        handlers, libraries.handlers = libraries.handlers, [handler]
        try:
            yield
        finally:
            libraries.handlers = handlers
            state.configure_logging(level)


def choose_processor(
    settings: OreSettings, processors: Collection[str], environ: Mapping[str, str]
) -> tuple[OreSettings, str | None]:
    """The settings to chat with and, when echo will answer, the one line saying why.

    An explicitly configured `processor.name` is kept. Otherwise `openai` is used when
    it is among the registered `processors` and the environment names an endpoint.
    """
    explicit = any(
        value.key == "processor.name" and value.source != "default"
        for value in settings.describe_sources()
    )
    if explicit:
        return settings, None
    installed = MODEL_PROCESSOR in processors
    if installed and any(environ.get(name) for name in MODEL_ENDPOINT_ENV):
        processor = ProcessorSettings.model_validate(
            {**settings.processor.model_dump(), "name": MODEL_PROCESSOR}
        )
        return settings.model_copy(update={"processor": processor}), None
    return settings, _NO_MODEL.format(install="" if installed else _INSTALL_MODEL)


def _turn_processors(plugins: pluggy.PluginManager) -> list[str]:
    """Names of the registered turn processors (failing plugins are reported later)."""
    names: list[str] = []
    for _, caller in plugin_callers(plugins, "ore_register_turn_processors"):
        try:
            caller(register=lambda name, factory: names.append(name))
        except Exception:  # build_runtime names the plugin when it fails there too
            continue
    return names


def _conduit_class(registrations: Registrations) -> type[Conduit]:
    if CONDUIT not in registrations.conduits:
        raise ChatError(_INSTALL_CONDUIT)
    conduit: type[Conduit] = registrations.conduit(CONDUIT)
    return conduit


def _conduit_config(
    conduit: type[Conduit], settings: OreSettings, overrides: dict[str, Any]
) -> ConduitConfig:
    """The `[plugins.stdin]` table with the command-line choice of thread applied."""
    section = settings.plugin_config(CONDUIT)
    if overrides:
        section = {k: v for k, v in section.items() if k not in ("thread", "new")}
    return conduit.load_config({**section, **overrides})


async def _guarded(main: Coroutine[Any, Any, None]) -> None:
    """Run `main`; SIGTERM or SIGHUP (the terminal closed) cancels it as a clean end.

    Cancelling unwinds `main`'s exit stack, so the nats-server, which runs in a session
    of its own and would outlive a killed chat, is stopped too.
    """
    task = asyncio.ensure_future(main)
    terminated = False

    def terminate() -> None:
        nonlocal terminated
        terminated = True
        task.cancel()

    loop = asyncio.get_running_loop()
    for signum in _TERMINATING:
        loop.add_signal_handler(signum, terminate)
    try:
        await task
    except asyncio.CancelledError:
        if not terminated:
            raise
    finally:
        for signum in _TERMINATING:
            loop.remove_signal_handler(signum)


async def _everything(
    settings: OreSettings, plugins: pluggy.PluginManager, overrides: dict[str, Any]
) -> None:
    """A private nats-server, the core and the conduit, closed in reverse order."""
    settings, notice = choose_processor(settings, _turn_processors(plugins), os.environ)
    async with AsyncExitStack() as stack:
        runtime = await build_runtime(settings, plugins)
        stack.push_async_callback(runtime.aclose)
        conduit = _conduit_class(runtime.registrations)
        config = _conduit_config(conduit, settings, overrides)
        for line in [*runtime.notices, *([notice] if notice else [])]:
            click.echo(line, err=True)
        nats = settings.nats
        store_dir = stack.enter_context(tempfile.TemporaryDirectory(prefix="ore-chat-nats-"))
        server = EmbeddedNatsServer(store_dir, config=f"max_payload: {int(nats.max_payload)}\n")
        await server.astart()
        stack.push_async_callback(server.astop)
        service = CoreService(
            runtime.manager,
            servers=[server.url],
            subjects=Subjects(nats.subject_prefix),
            config=bus_config(nats),
            store_probe_interval=nats.store_probe_interval,
        )
        await service.start()
        stack.push_async_callback(service.stop, DRAIN_GRACE)
        # The private server has no credentials or TLS: those settings are for a real one.
        local = NatsSettings(url=[server.url], subject_prefix=nats.subject_prefix)
        client = await connect_conduit(conduit.name, local, CONNECT_TIMEOUT)
        stack.push_async_callback(client.close)
        await conduit().run(client, config)


async def _conduit_only(
    settings: OreSettings, plugins: pluggy.PluginManager, overrides: dict[str, Any]
) -> None:
    """The conduit alone, against the `ore serve` at the configured NATS."""
    conduit = _conduit_class(collect_registrations(plugins, settings))
    config = _conduit_config(conduit, settings, overrides)
    nats = settings.nats
    async with await connect_conduit(conduit.name, nats, CONNECT_TIMEOUT) as client:
        await conduit().run(client, config)
