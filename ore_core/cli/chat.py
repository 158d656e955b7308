"""`ore chat`: talk to ore in the terminal (or pipe lines through it).

With no NATS URL configured (`--nats`, `nats.url`), one process runs everything: a
private nats-server (its JetStream data in a temporary directory, so chats never
share it with `ore serve` or with each other), the core (`build_runtime` and a
`CoreService`, with the configured store) and the stdin conduit; all three stop in
reverse order when the chat ends (Ctrl-D, end of input, SIGTERM, SIGHUP). With a NATS URL it
only runs the conduit against the `ore serve` listening there.

Without a NATS URL, a core that `ore serve` runs on the same store is used instead of
starting a second one (`--nats auto` uses the recorded one whatever its store). The
processor is chosen as for `ore serve` (`ore_core.cli.processor`) and named in one
line at start. A chat killed with SIGKILL leaves its nats-server and its directory
behind: the next chat reaps them (`ore_core.cli.running`). Logs go to `chat.log` in
the user state directory, never between the lines of the chat.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import tempfile
from collections.abc import Coroutine, Iterator, Mapping
from contextlib import AsyncExitStack, contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import click
import platformdirs
import pluggy

from ore_core.bus.server.embedded import EmbeddedNatsServer
from ore_core.bus.service import CoreService
from ore_core.cli.app import build_runtime, embedded_config
from ore_core.cli.link import parse_typed_endpoint
from ore_core.cli.options import (
    CliState,
    bus_config,
    cli_state,
    connect_conduit,
    nats_option,
    nats_settings,
)
from ore_core.cli.processor import (
    MODEL_ENDPOINT_ENV,
    answering_line,
    choose_processor,
    turn_processors,
)
from ore_core.cli.processor_file import processor_option, use_processor_file
from ore_core.cli.running import (
    CHAT_NATS_PREFIX,
    ChatServer,
    RunningCore,
    find_running,
    forget_chat_server,
    reap_chat_servers,
    record_chat_server,
    running_cores,
    state_dir,
    store_key,
)
from ore_core.conduit.base import Conduit, ConduitConfig
from ore_core.conduit.client import ConduitClient
from ore_core.conduit.control import ControlClient
from ore_core.config import NatsSettings, OreSettings, ProcessorSettings
from ore_core.endpoint import ID_KEY, Endpoint
from ore_core.errors import ApiError, InvalidThreadId, OreError, ThreadNotFound
from ore_core.id_prefix import resolve_on_core
from ore_core.ids import validate_thread_id
from ore_core.logging import configure_logging
from ore_core.plugins.builtin.processors import ECHO
from ore_core.plugins.registry import Registrations, collect_registrations
from ore_core.subjects import Subjects

__all__ = ["ChatError", "chat"]

CONDUIT = "stdin"
AUTO = "auto"
"""`--nats auto`: the NATS of the `ore serve` recorded in the state directory."""
CONNECT_TIMEOUT = 5.0
"""Seconds to reach a configured NATS server before giving up (nats-py would retry forever)."""
DRAIN_GRACE = 1.0
"""Seconds a running turn may finish when the chat ends; the user has already left."""
LOG_FILE = "chat.log"
_TERMINATING = (signal.SIGTERM, signal.SIGHUP)

_INSTALL_CONDUIT = (
    "the stdin conduit is not installed: pip install ./conduits/stdin "
    "(the ore-conduit-stdin package), or allow it in ORE_LOAD_PLUGINS"
)


class ChatError(OreError):
    """`ore chat` cannot start; the message says what to install or configure."""


@click.command()
@click.argument("prompt", nargs=-1)
@click.option(
    "--thread",
    "thread_id",
    metavar="ID",
    help="Continue thread ID (any unique prefix of it); an unknown id is an error unless "
    "--new is given too.",
)
@click.option(
    "--new",
    "new_thread",
    is_flag=True,
    help="Start a new thread (with --thread: start it under that id).",
)
@click.option(
    "-m",
    "--model",
    metavar="MODEL",
    help="The model to answer with (processor.model), e.g. -m llama3.2.",
)
@click.option(
    "-s",
    "--system",
    "system_prompt",
    metavar="PROMPT",
    help="The system prompt the model is sent (processor.system_prompt), e.g. -s 'be brief'.",
)
@click.option(
    "-c",
    "--continue",
    "continue_last",
    is_flag=True,
    help="Continue the thread `ore chat` used last (also after a PROMPT or a pipe).",
)
@processor_option("chat")
@click.option(
    "--attach",
    "attach_to",
    metavar="CONDUIT:KEY",
    help="Join the thread an endpoint is linked to (`nats:room`, "
    "`slack:-:T0123:C0123:1712.0001`; `ore conduit --list` shows each conduit's form): "
    "the terminal is linked to it (stdin:id=THREAD) and what is typed shows there with its label. "
    "Needs a running `ore serve`.",
)
@click.option(
    "--create",
    is_flag=True,
    help="With --attach: start a thread for a conversation no conduit has seen yet, "
    "without asking.",
)
@nats_option(
    help="NATS of a running `ore serve`; `auto` finds the one `ore serve` recorded; repeat "
    "for a cluster (default: nats.url, else the recorded `ore serve` on the same store, "
    "else everything runs in this process).",
)
def chat(
    prompt: tuple[str, ...],
    thread_id: str | None,
    new_thread: bool,
    model: str | None,
    system_prompt: str | None,
    continue_last: bool,
    processor_spec: str | None,
    attach_to: str | None,
    create: bool,
    nats_urls: tuple[str, ...],
) -> None:
    """Chat with ore in the terminal; on a pipe, answer each input line.

    With PROMPT, send it as one message, print the answer and exit; piped input is
    added to it (`cat notes.md | ore chat "summarise this"`). Without --thread or
    --new, a terminal chat resumes the thread it used last; piped input and a PROMPT
    start a new thread, unless -c continues the last one.
    """
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
    if prompt:
        overrides["prompt"] = " ".join(prompt)
    if continue_last:
        if thread_id is not None or new_thread or attach_to is not None:
            raise click.UsageError(
                "-c continues the last thread: leave out --thread, --new and --attach"
            )
        overrides["resume"] = True
    settings = state.settings
    attach = _running_core(settings, nats_urls)
    endpoint: Endpoint | None = None
    if attach_to is not None:
        if thread_id is not None or new_thread:
            raise click.UsageError("--attach chooses the thread: leave out --thread and --new")
        try:
            endpoint = parse_typed_endpoint(attach_to, state.plugin_manager, state.settings)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--attach") from None
        if attach is None and not nats_urls and not settings.nats.url:
            raise ChatError(
                "--attach joins a thread of a running `ore serve`: start one (or pass --nats)"
            )
    _refuse_core_options(attach, nats_urls or settings.nats.url, system_prompt, processor_spec)
    from_file: str | None = None
    if attach is not None:
        if model is not None:
            raise click.UsageError(
                f"-m chooses the model of the core `ore chat` starts; {attach.describe()} "
                "answers with its own: type /model NAME in the chat instead"
            )
        nats_urls = (attach.nats_url,)
    elif model is not None and (nats_urls or settings.nats.url):
        raise click.UsageError(
            "-m chooses the model of the core `ore chat` starts; the core at --nats / "
            "nats.url answers with its own: type /model NAME in the chat instead"
        )
    if attach is None and not nats_urls and not settings.nats.url:
        settings = _model_settings(settings, state.plugin_manager, model, system_prompt)
        if processor_spec is not None:
            from_file = use_processor_file(processor_spec, state.plugin_manager)
    with _logs_to_file(state):
        nats = nats_settings(settings.nats, [url for url in nats_urls if url != AUTO])
        settings = settings.model_copy(update={"nats": nats})
        if attach is not None:
            answers = f"; answering with {attach.processor}" if attach.processor else ""
            click.echo(f"Using {attach.describe()}{answers}", err=True)
            unused = _unused_model_env(attach, os.environ)
            if unused is not None:
                click.echo(unused, err=True)
        if endpoint is not None:
            run_attached = _conduit_only(
                settings, state.plugin_manager, overrides, endpoint, create
            )
            asyncio.run(_guarded(run_attached))
            return
        if nats.url:
            asyncio.run(_guarded(_conduit_only(settings, state.plugin_manager, overrides)))
        else:
            run = _everything(settings, state.plugin_manager, overrides, from_file)
            asyncio.run(_guarded(run))


def _refuse_core_options(
    attach: RunningCore | None,
    elsewhere: object,
    system_prompt: str | None,
    processor_spec: str | None,
) -> None:
    """-s and --processor choose how the core `ore chat` starts answers: refused, in one
    line, when another core answers (a running `ore serve`, or the core at --nats)."""
    given = [
        flag
        for flag, value in (("-s", system_prompt), ("--processor", processor_spec))
        if value is not None
    ]
    if not given or (attach is None and not elsewhere):
        return
    core = attach.describe() if attach is not None else "the core at --nats / nats.url"
    raise click.UsageError(
        f"{given[0]} chooses how the core `ore chat` starts answers; {core} answers with "
        "its own processor: set it there ([processor] in its ore.toml, or its --processor)"
    )


def _model_settings(
    settings: OreSettings,
    plugins: pluggy.PluginManager,
    model: str | None,
    system_prompt: str | None,
) -> OreSettings:
    """`settings` with -m (processor.model) and -s (processor.system_prompt) applied;
    refused in one line when echo answers, which has neither."""
    update = {"model": model, "system_prompt": system_prompt}
    chosen = {key: value for key, value in update.items() if value is not None}
    if not chosen:
        return settings
    processor = ProcessorSettings.model_validate({**settings.processor.model_dump(), **chosen})
    settings = settings.model_copy(update={"processor": processor})
    echo = choose_processor(settings, turn_processors(plugins), os.environ)
    if echo.echo_reason is not None:
        what = (
            f"-m {model} chooses the model a model processor asks"
            if model
            else "-s sets the system prompt a model processor sends"
        )
        raise click.UsageError(f"{what}, but echo answers: {echo.echo_reason}")
    return settings


def _unused_model_env(running: RunningCore, environ: Mapping[str, str]) -> str | None:
    """The line saying a model variable set for this chat is not what answers: the core
    that answers is the running `ore serve`, which read its own environment."""
    named = [name for name in MODEL_ENDPOINT_ENV if environ.get(name)]
    if not named or not running.processor.startswith(f"{ECHO}:"):
        return None
    return (
        f"{named[0]} is set here, but the core that answers is ore serve (pid {running.pid}), "
        "with echo: set it where `ore serve` runs, or type /model NAME in the chat"
    )


def _running_core(settings: OreSettings, nats_urls: tuple[str, ...]) -> RunningCore | None:
    """The recorded `ore serve` to talk to: asked for (`--nats auto`), or on our store.

    A chat must not start a second core on a store a running core serves.
    """
    if AUTO in nats_urls:
        running = find_running()
        if running is None:
            raise ChatError(
                "--nats auto: no running `ore serve` recorded in "
                f"{state_dir()}; start one with `ore serve`, or pass its URL"
            )
        return running
    if nats_urls or settings.nats.url:
        return None
    return next((core for core in running_cores() if core.store == store_key(settings)), None)


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
    if "thread" in overrides or "new" in overrides:
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
    settings: OreSettings,
    plugins: pluggy.PluginManager,
    overrides: dict[str, Any],
    from_file: str | None = None,
) -> None:
    """A private nats-server, the core and the conduit, closed in reverse order."""
    reap_chat_servers()  # what chats killed with SIGKILL left behind
    choice = choose_processor(settings, turn_processors(plugins), os.environ, from_file=from_file)
    settings = choice.settings
    async with AsyncExitStack() as stack:
        runtime = await build_runtime(settings, plugins)
        stack.push_async_callback(runtime.aclose)
        conduit = _conduit_class(runtime.registrations)
        config = _conduit_config(conduit, settings, overrides)
        for line in runtime.notices:
            click.echo(line, err=True)
        described = runtime.registrations.interceptor_descriptions()
        click.echo(
            answering_line(runtime.processor, runtime.processor_description, choice, described),
            err=True,
        )
        nats = settings.nats
        store_dir = stack.enter_context(tempfile.TemporaryDirectory(prefix=CHAT_NATS_PREFIX))
        # die_with_parent: a chat killed with SIGKILL leaves no server running.
        server = EmbeddedNatsServer(store_dir, config=embedded_config(nats), die_with_parent=True)
        await server.astart()
        stack.push_async_callback(server.astop)
        record_chat_server(ChatServer(os.getpid(), server.pid, store_dir))
        stack.callback(forget_chat_server, os.getpid())
        service = CoreService(
            runtime.manager,
            servers=[server.url],
            subjects=Subjects(nats.subject_prefix),
            config=bus_config(nats, settings.files),
            store_probe_interval=nats.store_probe_interval,
            processor_name=runtime.processor,
        )
        await service.start()
        stack.push_async_callback(service.stop, DRAIN_GRACE)
        # The private server has no credentials or TLS: those settings are for a real one.
        local = NatsSettings(url=[server.url], subject_prefix=nats.subject_prefix)
        client = await connect_conduit(conduit.name, local, CONNECT_TIMEOUT, settings.files)
        stack.push_async_callback(client.close)
        await conduit().run(client, config)


async def _conduit_only(
    settings: OreSettings,
    plugins: pluggy.PluginManager,
    overrides: dict[str, Any],
    attach: Endpoint | None = None,
    create: bool = False,
) -> None:
    """The conduit alone, against the `ore serve` at the configured NATS."""
    conduit = _conduit_class(collect_registrations(plugins, settings))
    nats = settings.nats
    async with await connect_conduit(conduit.name, nats, CONNECT_TIMEOUT, settings.files) as client:
        if attach is not None:
            overrides = {**overrides, "thread": await _attach(client, attach, create)}
        config = _conduit_config(conduit, settings, overrides)
        await conduit().run(client, config)


async def _conversation_thread(client: ConduitClient, endpoint: Endpoint, create: bool) -> str:
    """The thread of the conversation `endpoint` names, as its conduit's lookup finds it;
    one no conduit has seen is made only with `create` or a yes at the terminal (a typo
    must not make a thread and a stray link)."""
    admin = ControlClient.beside(client)
    body = {"namespace": endpoint.namespace, "key": endpoint.key, "value": endpoint.value}
    if not create:
        try:
            return str((await admin.call("threads.lookup", {**body, "create": False}))["id"])
        except ApiError as exc:
            if exc.status != 404:
                raise
        question = (
            f"No {endpoint.namespace} conduit has seen {endpoint.namespace}:{endpoint.value}; "
            "start a thread for it?"
        )
        if not (sys.stdin.isatty() and click.confirm(question, err=True)):
            raise ChatError(
                f"--attach: no {endpoint.namespace} conduit has seen "
                f"{endpoint.namespace}:{endpoint.value} (a typo?); --create starts a thread for it"
            )
    return str((await admin.call("threads.lookup", body))["id"])


async def _attach(client: ConduitClient, endpoint: Endpoint, create: bool = False) -> str:
    """The thread of `endpoint` (the one it is linked to, else the conversation's own, as
    its conduit's lookup finds or makes it), now linked to this terminal too: an
    operator's act, through the admin API with the chat's credentials."""
    admin = ControlClient.beside(client)
    try:
        if endpoint.key == ID_KEY:  # a thread id, typed as `ore threads` takes it: a prefix
            endpoint = replace(endpoint, value=await resolve_on_core(client, endpoint.value))
        body = {"namespace": endpoint.namespace, "key": endpoint.key, "value": endpoint.value}
        try:
            thread = str((await admin.call("links.lookup", {"endpoint": body}))["thread"])
        except ApiError as exc:
            if exc.status != 404:
                raise
            thread = (
                endpoint.value
                if endpoint.key == ID_KEY  # the thread it names, which exists
                else await _conversation_thread(client, endpoint, create)
            )
    except (ApiError, ThreadNotFound) as exc:
        raise ChatError(f"--attach: {exc}") from None
    terminal = {"namespace": client.namespace, "key": ID_KEY, "value": thread}
    try:
        await admin.call("links.add", {"thread": thread, "endpoint": terminal, "exist_ok": True})
    except ApiError as exc:
        raise ChatError(f"--attach: cannot link the terminal to thread {thread}: {exc}") from None
    click.echo(f"Attached to thread {thread} ({endpoint.namespace})", err=True)
    return thread
