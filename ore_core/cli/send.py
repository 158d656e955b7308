"""`ore send ENDPOINT TEXT`: one message into an endpoint's conversation, as its conduit
would send it (the SDK, under the conduit's namespace), for trying a bridge without the
platform: a terminal attached to a linked thread shows it with its label.

The thread is the one the endpoint is linked to, else the conversation's own (found or
made by the conduit's lookup key, as the conduit would on its platform's first message).
Talks to a running `ore serve` (or `nats.url`).
"""

from __future__ import annotations

import asyncio

import click

from ore_core.cli.link import parse_typed_endpoint
from ore_core.cli.options import cli_state, connect_conduit, nats_settings
from ore_core.cli.running import find_running
from ore_core.conduit import ConduitClient, ControlClient
from ore_core.config import NatsSettings
from ore_core.endpoint import ID_KEY, Endpoint
from ore_core.errors import ApiError, OreError

__all__ = ["send"]

_CONNECT_TIMEOUT = 10.0


@click.command()
@click.argument("endpoint")
@click.argument("text")
@click.option("--name", default="ore send", show_default=True, help="The sender's name.")
def send(endpoint: str, text: str, name: str) -> None:
    """Send TEXT to ENDPOINT's conversation (`nats:room`) as its conduit would."""
    state = cli_state()
    target = parse_typed_endpoint(endpoint, state.plugin_manager, state.settings)
    nats = state.settings.nats
    if not nats.url:
        running = find_running()
        if running is None:
            raise OreError("ore send: no running `ore serve` recorded; start `ore serve` first")
        nats = nats_settings(nats, [running.nats_url])
    thread = asyncio.run(_send(target, text, name, nats))
    click.echo(f"sent to thread {thread} as {target.namespace}:{target.value}")


async def _send(target: Endpoint, text: str, name: str, nats: NatsSettings) -> str:
    async with await connect_conduit(target.namespace, nats, _CONNECT_TIMEOUT) as client:
        try:
            thread = await _thread_of(client, target)
            await client.send(thread, text, user_name=name)
        except ApiError as exc:
            raise OreError(f"ore send: {exc}") from None
        return thread


async def _thread_of(client: ConduitClient, target: Endpoint) -> str:
    if target.key == ID_KEY:
        return target.value
    body = {"endpoint": target.as_dict()}
    try:
        return str((await ControlClient.beside(client).call("links.lookup", body))["thread"])
    except ApiError as exc:
        if exc.status != 404:
            raise
    thread, _ = await client.lookup_or_create(target.key, target.value)
    return thread
