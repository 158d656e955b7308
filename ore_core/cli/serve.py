"""`ore serve`: run the ore core (plugins, store, Manager) behind NATS until SIGTERM.

With no NATS URL (`--nats` or `nats.url`) it first starts a private embedded
nats-server (JetStream, loopback only, data under the user's state directory) on
port 4222 when that is free (`--port` to choose), prints where it listens, and
stops it after the core has drained. `--auth FILE` gives that server the users and
permissions `ore auth` wrote; the core then connects with the `[nats]` credentials of
the settings (`ore auth`'s core.toml). Once serving it prints which processor answers
and records its NATS URL and store in the state directory (`ore_core.cli.running`),
where the other commands find it. SIGTERM or SIGINT drains: running turns finish (a
second signal stops at once), the `ore_shutdown` hooks run, the store closes, and the
exit status is 0. If a background task crashes,
the core stops at once the same way and the status is 1.
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

import click

from ore_core import tracing
from ore_core._nats.connection import NatsCredentials
from ore_core.bridge.gateways import check_gateways
from ore_core.bus.server.embedded import default_store_dir, stop_orphan
from ore_core.bus.service import CoreService, run
from ore_core.cli.app import build_runtime, deployment_durability, start_embedded_nats
from ore_core.cli.link import conversation_keys, key_forms
from ore_core.cli.options import bus_config, cli_state, nats_option, nats_settings
from ore_core.cli.processor import (
    ProcessorChoice,
    answering_line,
    choose_processor,
    turn_processors,
)
from ore_core.cli.processor_file import processor_option, use_processor_file
from ore_core.cli.running import (
    RunningCore,
    record_running,
    remove_record,
    running_cores,
    state_dir,
    store_key,
)
from ore_core.config import OreSettings
from ore_core.errors import OreError
from ore_core.plugins.manager import OrePluginManager
from ore_core.subjects import Subjects

__all__ = ["DEFAULT_PORT", "serve"]


DEFAULT_PORT = 4222
"""The port of the embedded nats-server when it is free (the port every NATS doc assumes)."""


@click.command()
@nats_option(
    help="NATS server URL; repeat for a cluster (default: nats.url, else an embedded server)."
)
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    help=f"Client port of the embedded NATS server (default: {DEFAULT_PORT} when free, else "
    "any free port; 0: any free port).",
)
@click.option(
    "--health-port",
    type=click.IntRange(0, 65535),
    help="Serve GET /healthz and /readyz on 127.0.0.1 at this port (0: any free port).",
)
@click.option(
    "--partitions",
    type=int,
    help="Ingress partitions, a power of two (default: nats.partitions, else the "
    "existing deployment's count, else 8).",
)
@click.option(
    "--auth",
    "auth_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Users and permissions for the embedded server (the nats-auth.conf of `ore auth`).",
)
@click.option(
    "--store",
    "store_name",
    metavar="NAME",
    help="The store to keep threads in (default: store.name): sqlite for one machine, "
    "jetstream for several workers sharing the threads.",
)
@processor_option("serve")
def serve(
    nats_urls: tuple[str, ...],
    port: int | None,
    health_port: int | None,
    partitions: int | None,
    auth_file: Path | None,
    store_name: str | None,
    processor_spec: str | None,
) -> None:
    """Run the ore core on NATS until SIGTERM or Ctrl-C.

    It prints the NATS URL and records it in the state directory, where `ore chat`,
    `ore conduit NAME`, `ore threads` and `ore doctor` find it.
    """
    state = cli_state()
    # Plugins (ore_configure) see the effective settings, options included.
    nats = nats_settings(state.settings.nats, nats_urls, partitions)
    if port is not None and nats.url:
        raise click.UsageError("--port is the port of the embedded server: not with --nats")
    if auth_file is not None:
        if nats.url:
            raise click.UsageError(
                "--auth configures the embedded server; a server at nats.url / --nats has "
                "its own configuration: include the file there instead"
            )
        if not (nats.user or nats.nkey_seed_file or nats.creds_file or nats.token):
            raise click.UsageError(
                "--auth needs the core's own credentials: run with --config core.toml "
                "(written by `ore auth` next to the auth file)"
            )
    elif not nats.url and (nats.user or nats.nkey_seed_file or nats.creds_file or nats.token):
        raise click.UsageError(
            "the [nats] settings name a user (`ore auth`'s core.toml?), but the embedded "
            "server would run without users and let anyone in: add --auth with the "
            "nats-auth.conf `ore auth` wrote next to it, or use --nats for a server of your own"
        )
    auth = None if auth_file is None else auth_file.read_text(encoding="utf-8")
    update: dict[str, object] = {"nats": nats}
    if store_name:
        update["store"] = state.settings.store.model_copy(update={"name": store_name})
    named = processor_spec and use_processor_file(processor_spec, state.plugin_manager)
    choice = choose_processor(
        state.settings.model_copy(update=update),
        turn_processors(state.plugin_manager),
        os.environ,
        from_file=named,
    )
    settings = choice.settings
    # Workers sharing one NATS may share a store; two private servers on one store may not.
    same_store = [core for core in running_cores() if core.store == store_key(settings)]
    if not nats.url and same_store:
        raise OreError(
            f"{same_store[0].describe()} already serves this store; stop it first, or use "
            f"it: ore chat --nats auto"
        )
    state_dir().mkdir(parents=True, exist_ok=True)  # fails here, in one line, if read-only
    servers: list[str] = []
    answering: list[str] = []  # said once the core serves: a core that fails to start says why

    def started(service: CoreService) -> None:
        processor = answering[0].removeprefix("answering with ")
        record_running(RunningCore(os.getpid(), servers[0], store_key(settings), processor))
        click.echo(answering[0])
        # Said once the core serves: a server refused at the start gets its one line only.
        click.echo(f"Durability: {deployment_durability(settings.nats)}")
        for other in running_cores():
            if other.nats_url == servers[0] and other.processor not in ("", processor):
                click.echo(
                    f"warning: {other.describe()} answers with {other.processor}, this worker "
                    f"with {processor}: the answer to a message depends on which worker owns "
                    "its thread; give every worker of a deployment the same [processor]",
                    err=True,
                )
        click.echo(f"ore core ready: NATS {servers[0]} (recorded in {state_dir()})")
        if service.health_port is not None:
            url = f"http://127.0.0.1:{service.health_port}"
            click.echo(f"health: {url}/healthz and {url}/readyz; metrics: {url}/metrics")

    tracing.configure("ore-serve")  # on only when OTEL_EXPORTER_OTLP_*ENDPOINT is set
    try:
        status = run(
            lambda: _core(
                settings, choice, state.plugin_manager, port, health_port, servers, answering, auth
            ),
            started,
        )
    finally:
        remove_record(os.getpid())
        tracing.shutdown()  # export the spans still pending
    if status:
        raise SystemExit(status)  # a background task crashed (the log says which)


def _embedded_port(port: int | None, default: int = DEFAULT_PORT) -> int | None:
    """The fixed port to ask for: `--port`, else `default` when free; None: any free port."""
    if port is not None:
        return port or None
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        # As nats-server binds: the TIME-WAIT sockets of a server just stopped do not count.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", default))
        except OSError:
            return None
    return default


@asynccontextmanager
async def _core(
    settings: OreSettings,
    choice: ProcessorChoice,
    plugins: OrePluginManager,
    port: int | None,
    health_port: int | None,
    servers: list[str],
    answering: list[str],
    auth: str | None = None,
) -> AsyncIterator[CoreService]:
    """The core service, with what it needs opened around it and closed after it drains.

    Closed in reverse order of opening: the runtime (shutdown hooks, streams, store)
    before the embedded nats-server it talked through. `servers` receives the URLs,
    `answering` the line that says which processor answers.
    """
    nats = settings.nats
    check_gateways(
        settings.gateway, conversation_keys(plugins, settings), key_forms(plugins, settings)
    )
    async with AsyncExitStack() as stack:
        servers[:] = list(nats.url or [])
        if not servers:
            # An orphan of an earlier serve would hold 4222: stopped before the port is chosen.
            await asyncio.to_thread(stop_orphan, default_store_dir())
            fixed = _embedded_port(port)
            if port is None and fixed is None:
                click.echo(f"Port {DEFAULT_PORT} is in use: the embedded NATS server takes another")
            embedded = await start_embedded_nats(nats, port=fixed, auth=auth)
            stack.push_async_callback(embedded.astop)
            click.echo(
                f"Embedded NATS server listening on {embedded.url} (data in {embedded.store_dir})"
            )
            servers[:] = [embedded.url]
        runtime = await build_runtime(settings, plugins)
        stack.push_async_callback(runtime.aclose)
        for notice in runtime.notices:
            click.echo(notice, err=True)
        described = runtime.registrations.interceptor_descriptions()
        answering[:] = [
            answering_line(runtime.processor, runtime.processor_description, choice, described)
        ]
        yield CoreService(
            runtime.manager,
            servers=servers,
            subjects=Subjects(nats.subject_prefix),
            config=bus_config(nats, settings.files),
            store_probe_interval=nats.store_probe_interval,
            health_port=health_port,
            credentials=NatsCredentials.from_settings(nats),
            gateways=settings.gateway,
            conversation_keys=conversation_keys(plugins, settings),
            processor_name=runtime.processor,
        )
