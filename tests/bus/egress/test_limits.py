"""JetStream limits reached mid-load: users are told, /readyz fails, nothing is lost (issue 15)."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from nats.aio.client import Client
from nats.js.api import DiscardPolicy, StreamConfig
from nats.js.client import JetStreamContext
from nats.js.errors import ServiceUnavailableError

from ore_core.bus.egress.egress import STORAGE_FULL
from ore_core.bus.server.embedded import EmbeddedNatsServer
from ore_core.conduit.client import ConduitClient
from ore_core.errors import BusError
from ore_core.events import UserMessageEvent
from ore_core.session.echo import EchoProcessor
from ore_core.session.turn_context import TurnContext
from tests.bus import raw
from tests.bus.conftest import CoreFactory, Outbox
from tests.bus.test_service_e2e import http_status

THREADS = [f"lim{index}" for index in range(12)]
ACCOUNT = (
    "no_auth_user: core\n"
    "accounts {{ ORE: {{ jetstream: {{ max_file: {max_file} }}, "
    "users: [{{user: core, password: core}}] }} }}\n"
)
ROOMY = 4 * 1024**3  # room for the streams' own max_bytes


@pytest.fixture
def ore_nats_server(tmp_path: Path) -> Iterator[EmbeddedNatsServer]:
    """The kit's server, with an account whose storage limit a test can lower and raise."""
    with EmbeddedNatsServer(tmp_path / "nats", config=ACCOUNT.format(max_file=ROOMY)) as server:
        yield server


async def _account_limit(server: EmbeddedNatsServer, nc: Client, max_file: int) -> None:
    """Reload the server with another account storage limit; wait until it applies."""
    server.config_path.write_text(ACCOUNT.format(max_file=max_file), encoding="utf-8")
    os.kill(server.pid, signal.SIGHUP)
    js = nc.jetstream()

    async def applied() -> bool:
        try:
            return (await js.account_info()).limits.max_storage == max_file
        except ServiceUnavailableError:  # the account's JetStream is reloading
            return False

    await raw.eventually(applied)


def _told(outbox: Outbox, thread_id: str) -> bool:
    return any(
        event["kind"] == "error" and event.get("code") == STORAGE_FULL
        for event in outbox.events(thread_id)
    )


def _texts(outbox: Outbox, thread_id: str) -> list[str]:
    return [e["content"] for e in outbox.events(thread_id) if e["kind"] == "text"]


class _GatedEcho:
    """Echo; a `second` message waits for `gate` (so its input is stored before a limit)."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.waiting = 0

    async def __call__(self, ctx: TurnContext) -> None:
        if ctx.event.content == "second":
            self.waiting += 1
            await self.gate.wait()
        await EchoProcessor()(ctx)


async def _per_subject(js: JetStreamContext) -> dict[str, int]:
    info = await js.stream_info("ORE_EVENTS", subjects_filter=">")
    return dict(info.state.subjects or {})


async def _leave_no_room(
    js: JetStreamContext, limit: str, server: EmbeddedNatsServer, nc: Client
) -> StreamConfig:
    """Tighten `limit` so that no further stored event fits; returns the config to restore."""
    counts = await _per_subject(js)
    info = await js.stream_info("ORE_EVENTS")
    if limit == "account":
        await _account_limit(server, nc, (await js.account_info()).storage + 1)
    elif limit == "max_bytes":
        tight = dataclasses.replace(
            info.config, max_bytes=info.state.bytes, discard=DiscardPolicy.NEW
        )
        await js.update_stream(tight)
    else:
        tight = dataclasses.replace(
            info.config,
            max_msgs_per_subject=max(counts.values()),
            discard=DiscardPolicy.NEW,
            discard_new_per_subject=True,
        )
        await js.update_stream(tight)
    return info.config


@pytest.mark.slow
@pytest.mark.parametrize("limit", ["max_bytes", "max_msgs_per_subject", "account"])
async def test_a_limit_reached_mid_load_tells_users_fails_readyz_and_loses_nothing(
    start_core: CoreFactory,
    ore_nats_client: Client,
    ore_nats_server: EmbeddedNatsServer,
    outbox: Outbox,
    limit: str,
) -> None:
    processor = _GatedEcho()
    core = await start_core(processor, health_port=0)
    js = ore_nats_client.jetstream()
    for thread in THREADS:
        await raw.publish(ore_nats_client, thread, raw.user_message("first", f"{thread}-1"))
    for thread in THREADS:
        await outbox.done(thread)
    per_thread = len(outbox.stored(THREADS[0]))
    for thread in THREADS:
        await raw.publish(ore_nats_client, thread, raw.user_message("second", f"{thread}-2"))
    await raw.wait_for(lambda: processor.waiting == len(THREADS))

    async def settled() -> bool:  # the first turns are stored (one batch each); the
        # running turns store nothing before they end, so the limit holds their batch
        counts = await _per_subject(js)
        return len(counts) == len(THREADS) and set(counts.values()) == {per_thread}

    await raw.eventually(settled)

    # The operator (or the account) leaves no room for another stored event.
    roomy = await _leave_no_room(js, limit, ore_nats_server, ore_nats_client)
    processor.gate.set()

    # Every user is told, the core says it is not ready, and nothing is acknowledged.
    await outbox.until(lambda: all(_told(outbox, thread) for thread in THREADS))
    assert core.nc.is_connected
    assert await http_status(core.health_port or 0, "/readyz") == 503
    assert await http_status(core.health_port or 0, "/healthz") == 200
    assert not await raw.all_acknowledged(ore_nats_client)
    assert all(outbox.count_done(thread) == 1 for thread in THREADS)

    # Space frees: every held answer is stored and delivered, then everything is acked.
    if limit == "account":
        await _account_limit(ore_nats_server, ore_nats_client, ROOMY)
    else:
        await js.update_stream(roomy)
    for thread in THREADS:
        await outbox.done(thread, 2)
        assert _texts(outbox, thread) == ["first", "second"]
    await raw.eventually(lambda: raw.all_acknowledged(ore_nats_client))
    await raw.eventually(lambda: _ready(core.health_port or 0))
    stored = await js.stream_info("ORE_EVENTS")
    assert stored.state.messages == 2 * per_thread * len(THREADS)


async def _ready(port: int) -> bool:
    return await http_status(port, "/readyz") == 200


async def test_a_full_ingress_stream_refuses_the_publisher(
    start_core: CoreFactory, ore_nats_client: Client, ore_nats_url: str
) -> None:
    await start_core()
    js = ore_nats_client.jetstream()
    config = (await js.stream_info("ORE_IN")).config
    await js.update_stream(dataclasses.replace(config, max_msgs=1))
    await raw.publish(ore_nats_client, "full1", raw.user_message("one", "f-1"))
    await asyncio.sleep(0)

    # ORE_IN discards new messages when full: the oldest unhandled one is never dropped.
    assert (await js.stream_info("ORE_IN")).config.discard == DiscardPolicy.NEW
    with pytest.raises(Exception, match="maximum messages exceeded"):
        await raw.publish(ore_nats_client, "full2", raw.user_message("two", "f-2"))

    client = await ConduitClient.connect(ore_nats_url, name="probe", send_deadline=5)
    try:
        with pytest.raises(BusError, match=r"ore's ingress stream is full \(maximum messages"):
            await client.send("full3", UserMessageEvent(id="f-3", content="three"))
    finally:
        await client.close()
