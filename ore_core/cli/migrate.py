"""`ore migrate`: bring the server's ore streams to this layout (bus/server/migrate.py).

`--dry-run` prints what would change and changes nothing. Without it, every change is
printed as it is made. The core must be stopped: the command refuses while a consumer
is in use. Connection settings are those of `ore serve` (`--nats`, `nats.*`); without
a URL it works on the embedded server's data directory, as `ore serve` would use it.
"""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack

import click
import nats as nats_py
from nats.errors import Error as NatsError

from ore_core._nats.connection import (
    MIN_SERVER_VERSION,
    NatsCredentials,
    check_jetstream,
    check_server,
)
from ore_core.bus.server.layout import build_layout
from ore_core.bus.server.migrate import migrate as run_migration
from ore_core.bus.server.migrate import plan_migration
from ore_core.bus.server.streams import BusConfig, adopt_partitions
from ore_core.cli.app import start_embedded_nats
from ore_core.cli.options import cli_state, nats_option, nats_settings
from ore_core.config import NatsSettings
from ore_core.errors import BusError
from ore_core.subjects import Subjects

__all__ = ["migrate"]

_CONNECT_TIMEOUT = 10.0


@click.command()
@nats_option(help="NATS server URL (default: nats.url, else the embedded server's data).")
@click.option(
    "--partitions",
    type=int,
    help="Ingress partitions to migrate to, a power of two (default: nats.partitions, "
    "else the existing count).",
)
@click.option("--dry-run", is_flag=True, help="Print what would change; change nothing.")
def migrate(nats_urls: tuple[str, ...], partitions: int | None, dry_run: bool) -> None:
    """Bring NATS streams and consumers to this ore's layout, keeping every message."""
    nats = nats_settings(cli_state().settings.nats, nats_urls, partitions)
    asyncio.run(_migrate(nats, dry_run))


async def _migrate(settings: NatsSettings, dry_run: bool) -> None:
    config = BusConfig(
        partitions=settings.partitions,
        max_payload=int(settings.max_payload),
        replicas=settings.replicas,
    )
    subjects = Subjects(settings.subject_prefix)
    async with AsyncExitStack() as stack:
        servers = list(settings.url or [])
        if not servers:
            embedded = await start_embedded_nats(settings)
            stack.push_async_callback(embedded.astop)
            servers = [embedded.url]
        options = NatsCredentials.from_settings(settings).connect_options()
        try:
            async with asyncio.timeout(_CONNECT_TIMEOUT):
                nc = await nats_py.connect(
                    servers=servers, name="ore-migrate", max_reconnect_attempts=0, **options
                )
        except (TimeoutError, NatsError, OSError) as exc:
            raise BusError(f"cannot connect to NATS at {', '.join(servers)}: {exc}") from None
        stack.push_async_callback(nc.close)
        wanted = build_layout(subjects, config)  # its features, whatever the count
        required = max(MIN_SERVER_VERSION, wanted.required_version())
        check_server(nc, required, wanted.features(), who="ore migrate")
        await check_jetstream(nc, who="ore migrate")
        js = nc.jetstream()
        # Unset, the count stays what it is: only --partitions (or the setting) moves it.
        layout = build_layout(subjects, await adopt_partitions(js, subjects, config))
        if dry_run:
            for line in (await plan_migration(js, layout)).lines():
                click.echo(line)
            return
        plan = await run_migration(js, layout, say=click.echo)
        for difference in plan.updates:
            click.echo(f"{difference.describe()} -> applied")
        click.echo("migrated" if plan.moves or plan.updates else plan.lines()[0])
