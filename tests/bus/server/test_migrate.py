"""Streams from another layout: refused at start in one line, moved by `ore migrate` (issue 15)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import uuid

import nats
import pytest
from nats.aio.client import Client
from nats.js.api import RetentionPolicy, StreamConfig

from ore_core.bus.server.layout import build_layout
from ore_core.bus.server.migrate import migrate, plan_migration, subject_matches
from ore_core.bus.server.streams import BusConfig, BusConfigError, diff_layout, ensure_streams
from ore_core.subjects import Subjects
from ore_core.testing.cluster import EmbeddedNatsCluster
from tests.bus import raw
from tests.bus.conftest import CoreFactory, Outbox
from tests.ore_process import ORE

OLD = BusConfig(partitions=4)
NEW = BusConfig(partitions=8)


def _ore(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(ORE), *args, "--nats", url],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "ORE_LOAD_PLUGINS": "", "ORE_LOG__LEVEL": "warning"},
    )


def _threads(count: int) -> list[str]:
    return [f"m{index}-{uuid.uuid4().hex[:6]}" for index in range(count)]


async def _handled_then_queued(
    ore_nats_client: Client, start_core: CoreFactory, outbox: Outbox
) -> tuple[list[str], list[str]]:
    """5 threads answered by a 4-partition core, then 10 messages left for the next core."""
    handled, queued = _threads(5), _threads(10)
    core = await start_core(config=OLD)
    for thread in handled:
        await raw.publish(ore_nats_client, thread, raw.user_message("before", uuid.uuid4().hex))
    for thread in handled:
        await outbox.done(thread)
    await core.stop()
    for thread in queued:
        await raw.publish(ore_nats_client, thread, raw.user_message("after", uuid.uuid4().hex))
    return handled, queued


async def test_another_partition_count_is_refused_then_migrated_keeping_unhandled_messages(
    ore_nats_client: Client, ore_nats_url: str, start_core: CoreFactory, outbox: Outbox
) -> None:
    handled, queued = await _handled_then_queued(ore_nats_client, start_core, outbox)
    js = ore_nats_client.jetstream()
    before = (await js.stream_info("ORE_IN")).state.messages

    # ore serve with 8 partitions: one line, nothing changed.
    serve = await asyncio.to_thread(_ore, ore_nats_url, "serve", "--partitions", "8")
    assert serve.returncode == 1
    assert serve.stderr.strip().splitlines() == [
        "Error: NATS has ore streams from another layout: stream ORE_IN: partition count is "
        "4, configured 8; run `ore migrate --dry-run` to see the change and `ore migrate` "
        "to apply it (it keeps every message), or use the deployment's settings"
    ]
    assert (await js.stream_info("ORE_IN")).state.messages == before

    dry = await asyncio.to_thread(_ore, ore_nats_url, "migrate", "--partitions", "8", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "ORE_IN: recreate (stream ORE_IN: partition count is 4, configured 8" in dry.stdout
    assert f"keep the {len(queued)} unhandled of {before} message(s)" in dry.stdout
    assert (await js.stream_info("ORE_IN")).config.subject_transform.dest.startswith(  # type: ignore[union-attr]
        "ore.inp.{{partition(4,"
    )

    done = await asyncio.to_thread(_ore, ore_nats_url, "migrate", "--partitions", "8")
    assert done.returncode == 0, done.stderr
    assert "10 message(s) copied to ORE_IN_MIGRATION and counted" in done.stdout
    assert not await diff_layout(js, build_layout(Subjects(), NEW))
    assert (await js.stream_info("ORE_IN")).state.messages == len(queued)

    # The 8-partition core answers every queued message, and no handled one again.
    await start_core(config=NEW)
    for thread in queued:
        events = await outbox.done(thread)
        assert any(e.get("content") == "after" for e in events if e["kind"] == "text")
    for thread in handled:
        assert outbox.count_done(thread) == 1


async def test_migrate_without_a_configured_count_keeps_the_deployments_count(
    ore_nats_client: Client, ore_nats_url: str
) -> None:
    """A migration for another reason never repartitions by itself: only `--partitions`
    (or the setting) changes the count, whatever the default of this ore is."""
    js = ore_nats_client.jetstream()
    await ensure_streams(js, Subjects(), BusConfig(partitions=4))

    dry = await asyncio.to_thread(_ore, ore_nats_url, "migrate", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.strip() == "the server already matches this ore's layout: nothing to migrate"
    assert (await js.stream_info("ORE_IN")).config.subject_transform.dest.startswith(  # type: ignore[union-attr]
        "ore.inp.{{partition(4,"
    )


async def test_a_stream_with_other_retention_is_migrated_with_every_message(
    ore_nats_client: Client,
) -> None:
    js = ore_nats_client.jetstream()
    await js.add_stream(
        StreamConfig(name="ORE_DLQ", subjects=["ore.dlq.>"], retention=RetentionPolicy.INTEREST)
    )
    await js.add_consumer("ORE_DLQ", durable_name="audit")  # interest keeps the messages
    for index in range(7):
        await js.publish(f"ore.dlq.reason{index % 2}", f"record {index}".encode())
    layout = build_layout(Subjects(), OLD)

    with pytest.raises(BusConfigError, match=r"stream ORE_DLQ: retention is 'interest'"):
        await ensure_streams(js, Subjects(), OLD)
    plan = await plan_migration(js, layout)
    assert plan.lines()[0].startswith("ORE_DLQ: recreate (stream ORE_DLQ: retention is")
    assert plan.lines()[0].endswith("keep all 7 message(s)")

    await migrate(js, layout)

    info = await js.stream_info("ORE_DLQ")
    assert info.config.retention == RetentionPolicy.LIMITS
    assert info.state.messages == 7
    kept = [(await js.get_msg("ORE_DLQ", seq)).data for seq in range(1, 8)]
    assert kept == [f"record {index}".encode() for index in range(7)]


async def test_an_older_layout_without_partitions_is_refused_then_migrated(
    ore_nats_client: Client, start_core: CoreFactory, outbox: Outbox
) -> None:
    js = ore_nats_client.jetstream()
    # What an ore without ingress partitions left behind: ORE_IN on ore.in.*, untransformed.
    await js.add_stream(StreamConfig(name="ORE_IN", subjects=["ore.in.*"]))
    threads = _threads(6)
    for thread in threads:  # schema 1 subjects: no namespace token
        await js.publish(
            f"ore.in.{thread}", json.dumps(raw.user_message("old", uuid.uuid4().hex)).encode()
        )
    layout = build_layout(Subjects(), OLD)

    with pytest.raises(
        BusConfigError,
        match=r"stream ORE_IN: subjects is \['ore.in.\*'\].*a layout of another ore version",
    ):
        await ensure_streams(js, Subjects(), OLD)
    await migrate(js, layout)

    await start_core(config=OLD)
    for thread in threads:
        await outbox.done(thread)


async def test_an_interrupted_migration_resumes_from_its_backup(ore_nats_client: Client) -> None:
    js = ore_nats_client.jetstream()
    await ensure_streams(js, Subjects(), OLD)
    threads = _threads(5)
    for thread in threads:
        await raw.publish(ore_nats_client, thread, raw.user_message("x", uuid.uuid4().hex))
    layout = build_layout(Subjects(), NEW)
    plan = await plan_migration(js, layout)
    # Simulate a crash after the old stream was deleted: the backup is all that is left.
    from ore_core.bus.server.migrate import _fill_backup

    await _fill_backup(js, plan.moves[0])
    await js.delete_stream("ORE_IN")

    again = await plan_migration(js, layout)
    assert [move.resume for move in again.moves] == [True]
    await migrate(js, layout)

    assert (await js.stream_info("ORE_IN")).state.messages == 5
    assert not await diff_layout(js, layout)


def test_subject_matching_follows_nats_wildcards() -> None:
    assert subject_matches("ore.inp.3.*", "ore.inp.3.t1")
    assert not subject_matches("ore.inp.3.*", "ore.inp.30.t1")
    assert subject_matches("ore.>", "ore.inp.3.t1")
    assert not subject_matches("ore.>", "ore")


async def test_other_replicas_are_refused_not_quietly_changed(ore_nats_client: Client) -> None:
    js = ore_nats_client.jetstream()
    await ensure_streams(js, Subjects(), OLD)

    with pytest.raises(
        BusConfigError,
        match=r"stream ORE_IN: num_replicas is 1, configured 3 \(and 8 more\); set "
        r"nats.replicas to keep it, or run `ore migrate --dry-run`",
    ):
        await ensure_streams(js, Subjects(), BusConfig(partitions=4, replicas=3))
    assert (await js.stream_info("ORE_IN")).config.num_replicas == 1


@pytest.mark.slow
async def test_migrate_scales_replicas_in_place_keeping_messages(
    ore_nats_cluster: EmbeddedNatsCluster,
) -> None:
    nc = await nats.connect(servers=ore_nats_cluster.urls)
    try:
        # R3 changes wait for Raft elections, slower than nats-py's 5 s default under load;
        # the timeout only bounds a hang.
        js = nc.jetstream(timeout=30)
        await ensure_streams(js, Subjects(), OLD)
        for thread in _threads(4):
            await raw.publish(nc, thread, raw.user_message("kept", uuid.uuid4().hex))
        layout = build_layout(Subjects(), BusConfig(partitions=4, replicas=3))

        plan = await plan_migration(js, layout)
        assert "stream ORE_IN: num_replicas is 1, configured 3 -> update in place" in plan.lines()
        await migrate(js, layout)

        info = await js.stream_info("ORE_IN")
        assert (info.config.num_replicas, info.state.messages) == (3, 4)
        assert not await diff_layout(js, layout)
    finally:
        await nc.close()
