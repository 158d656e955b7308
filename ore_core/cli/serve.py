"""`ore serve`: run the ore core (plugins, store, Manager) behind NATS until SIGTERM.

With no NATS URL (`--nats` or `nats.url`) it first starts a private embedded
nats-server (JetStream, bound to 127.0.0.1 only, data under the user's state
directory), prints where it listens, and stops it after the core has drained.
`--auth FILE` gives that server the users and permissions `ore auth` wrote; the core
then connects with the `[nats]` credentials of the settings (`ore auth`'s core.toml). SIGTERM or
SIGINT drains: running turns finish (a second signal stops at once), the
`ore_shutdown` hooks run, the store closes, and the exit status is 0.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

import click

from ore_core.bus.service import CoreService, run
from ore_core.cli.app import build_runtime, start_embedded_nats
from ore_core.cli.options import bus_config, cli_state, nats_option, nats_settings
from ore_core.conduit.connection import NatsCredentials
from ore_core.config import OreSettings
from ore_core.plugins.manager import OrePluginManager
from ore_core.subjects import Subjects

__all__ = ["serve"]


@click.command()
@nats_option(
    help="NATS server URL; repeat for a cluster (default: nats.url, else an embedded server)."
)
@click.option(
    "--health-port",
    type=click.IntRange(0, 65535),
    help="Serve GET /healthz and /readyz on 127.0.0.1 at this port (0: any free port).",
)
@click.option(
    "--partitions",
    type=int,
    help="Ingress partitions, a power of two (default: nats.partitions).",
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
def serve(
    nats_urls: tuple[str, ...],
    health_port: int | None,
    partitions: int | None,
    auth_file: Path | None,
    store_name: str | None,
) -> None:
    """Run the ore core on NATS until SIGTERM or Ctrl-C."""
    state = cli_state()
    # Plugins (ore_configure) see the effective settings, options included.
    nats = nats_settings(state.settings.nats, nats_urls, partitions)
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
    update: dict[str, object] = {"nats": nats}
    if store_name:
        update["store"] = state.settings.store.model_copy(update={"name": store_name})
    settings = state.settings.model_copy(update=update)
    auth = None if auth_file is None else auth_file.read_text(encoding="utf-8")
    run(lambda: _core(settings, state.plugin_manager, health_port, auth))


@asynccontextmanager
async def _core(
    settings: OreSettings,
    plugins: OrePluginManager,
    health_port: int | None,
    auth: str | None = None,
) -> AsyncIterator[CoreService]:
    """The core service, with what it needs opened around it and closed after it drains.

    Closed in reverse order of opening: the runtime (shutdown hooks, streams, store)
    before the embedded nats-server it talked through.
    """
    nats = settings.nats
    async with AsyncExitStack() as stack:
        servers = list(nats.url or [])
        if not servers:
            embedded = await start_embedded_nats(nats, auth)
            stack.push_async_callback(embedded.astop)
            click.echo(
                f"Embedded NATS server listening on {embedded.url} (data in {embedded.store_dir})"
            )
            servers = [embedded.url]
        runtime = await build_runtime(settings, plugins)
        stack.push_async_callback(runtime.aclose)
        yield CoreService(
            runtime.manager,
            servers=servers,
            subjects=Subjects(nats.subject_prefix),
            config=bus_config(nats),
            store_probe_interval=nats.store_probe_interval,
            health_port=health_port,
            credentials=NatsCredentials.from_settings(nats),
        )
