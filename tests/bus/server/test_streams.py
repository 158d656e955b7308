"""ensure_streams: ORE_IN, ORE_EVENTS, ORE_DLQ and the partition consumers, idempotently."""

from __future__ import annotations

import dataclasses

import pytest
from nats.aio.client import Client
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy, StreamConfig
from nats.js.errors import APIError

from ore_core.bus.server.layout import build_layout
from ore_core.bus.server.streams import (
    DEFAULT_PARTITIONS,
    HEADER_ALLOWANCE,
    BusConfig,
    BusConfigError,
    _put_consumer,
    adopt_partitions,
    consumer_name,
    ensure_streams,
    reset_consumer,
    settled_call,
)
from ore_core.errors import BusError
from ore_core.subjects import Subjects, partition_of

SUBJECTS = Subjects()
CONFIG = BusConfig(partitions=4, max_payload=10_000, events_max_age=3600.0)


async def test_ingress_stream_partitions_client_subjects(ore_nats_client: Client) -> None:
    await ensure_streams(ore_nats_client.jetstream(), SUBJECTS, CONFIG)

    config = (await ore_nats_client.jetstream().stream_info("ORE_IN")).config
    assert config.subjects == ["ore.in.*.*"]
    assert config.subject_transform is not None
    assert (
        config.subject_transform.dest
        == "ore.inp.{{partition(4,2)}}.{{wildcard(1)}}.{{wildcard(2)}}"
    )
    assert config.duplicate_window == 120.0
    assert config.max_msg_size == 10_000 + HEADER_ALLOWANCE


async def test_events_stream_is_republished_to_output_subjects(ore_nats_client: Client) -> None:
    await ensure_streams(ore_nats_client.jetstream(), SUBJECTS, CONFIG)

    config = (await ore_nats_client.jetstream().stream_info("ORE_EVENTS")).config
    assert config.subjects == ["ore.ev.*.*"]
    assert config.republish is not None
    assert (config.republish.src, config.republish.dest) == (
        "ore.ev.*.*",
        "ore.out.{{wildcard(1)}}.{{wildcard(2)}}",
    )
    assert config.allow_direct is True
    assert config.max_age == 3600.0


async def test_dead_letter_stream_takes_every_reason(ore_nats_client: Client) -> None:
    await ensure_streams(ore_nats_client.jetstream(), SUBJECTS, CONFIG)

    config = (await ore_nats_client.jetstream().stream_info("ORE_DLQ")).config
    assert config.subjects == ["ore.dlq.>"]


async def test_every_partition_gets_a_durable_explicit_ack_consumer(
    ore_nats_client: Client,
) -> None:
    js = ore_nats_client.jetstream()
    await ensure_streams(js, SUBJECTS, CONFIG)

    for partition in range(4):
        config = (await js.consumer_info("ORE_IN", consumer_name(partition))).config
        assert config.filter_subject == f"ore.inp.{partition}.*.*"
        assert config.ack_policy == AckPolicy.EXPLICIT
        assert (config.ack_wait, config.backoff) == (CONFIG.ack_wait, CONFIG.backoff)


async def test_a_thread_lands_in_the_partition_partition_of_names(ore_nats_client: Client) -> None:
    js = ore_nats_client.jetstream()
    await ensure_streams(js, SUBJECTS, CONFIG)

    for thread_id in ("t1", "t2", "alpha", "a-much-longer_thread-id"):
        await js.publish(f"ore.in.ns.{thread_id}", b"{}")
        stored = await js.get_last_msg("ORE_IN", f"ore.inp.*.ns.{thread_id}")
        assert stored.subject == f"ore.inp.{partition_of(thread_id, 4)}.ns.{thread_id}"


async def test_ensuring_twice_changes_nothing(ore_nats_client: Client) -> None:
    js = ore_nats_client.jetstream()
    await ensure_streams(js, SUBJECTS, CONFIG)
    before = [(await js.stream_info(name)).config for name in ("ORE_IN", "ORE_EVENTS", "ORE_DLQ")]

    await ensure_streams(js, SUBJECTS, CONFIG)

    after = [(await js.stream_info(name)).config for name in ("ORE_IN", "ORE_EVENTS", "ORE_DLQ")]
    assert after == before


async def test_changed_limits_are_updated_in_place(ore_nats_client: Client) -> None:
    js = ore_nats_client.jetstream()
    await ensure_streams(js, SUBJECTS, CONFIG)

    await ensure_streams(
        js, SUBJECTS, BusConfig(partitions=4, events_max_age=7200.0, ack_wait=10.0)
    )

    assert (await js.stream_info("ORE_EVENTS")).config.max_age == 7200.0
    assert (await js.consumer_info("ORE_IN", consumer_name(0))).config.ack_wait == 10.0


async def test_a_different_partition_count_is_refused_naming_the_stream(
    ore_nats_client: Client,
) -> None:
    js = ore_nats_client.jetstream()
    await ensure_streams(js, SUBJECTS, CONFIG)

    with pytest.raises(BusConfigError, match=r"ORE_IN.*partition count is 4, configured 8"):
        await ensure_streams(js, SUBJECTS, BusConfig(partitions=8))


async def test_without_a_configured_count_a_new_deployment_gets_the_default(
    ore_nats_client: Client,
) -> None:
    js = ore_nats_client.jetstream()
    assert (await adopt_partitions(js, SUBJECTS, BusConfig())).partitions == DEFAULT_PARTITIONS

    await ensure_streams(js, SUBJECTS, BusConfig())

    consumers = sorted(info.name for info in await js.consumers_info("ORE_IN"))
    assert consumers == sorted(consumer_name(p) for p in range(DEFAULT_PARTITIONS))


async def test_without_a_configured_count_the_existing_count_is_kept(
    ore_nats_client: Client,
) -> None:
    js = ore_nats_client.jetstream()
    await ensure_streams(js, SUBJECTS, BusConfig(partitions=32))

    assert (await adopt_partitions(js, SUBJECTS, BusConfig())).partitions == 32
    await ensure_streams(js, SUBJECTS, BusConfig())  # no refusal, nothing remade
    assert len(await js.consumers_info("ORE_IN")) == 32
    # A configured count is what it says: the existing one does not override it.
    assert (await adopt_partitions(js, SUBJECTS, CONFIG)).partitions == 4


async def test_a_stream_of_an_older_layout_without_partitions_counts_as_the_default(
    ore_nats_client: Client,
) -> None:
    """No transform to read a count from: the default, and the comparison names the
    old layout (`ore migrate` partitions it)."""
    js = ore_nats_client.jetstream()
    await js.add_stream(StreamConfig(name="ORE_IN", subjects=["ore.in.*"]))

    assert (await adopt_partitions(js, SUBJECTS, BusConfig())).partitions == DEFAULT_PARTITIONS
    with pytest.raises(BusConfigError, match=r"ORE_IN.*subjects"):
        await ensure_streams(js, SUBJECTS, BusConfig())


def test_an_unset_count_reads_as_the_default_until_settled() -> None:
    assert BusConfig().partitions is None
    assert BusConfig().partition_count == DEFAULT_PARTITIONS == 8
    assert BusConfig(partitions=2).partition_count == 2


async def test_a_stream_with_other_subjects_is_refused(ore_nats_client: Client) -> None:
    js = ore_nats_client.jetstream()
    await js.add_stream(StreamConfig(name="ORE_EVENTS", subjects=["elsewhere.>"]))

    with pytest.raises(BusConfigError, match=r"ORE_EVENTS.*subjects"):
        await ensure_streams(js, SUBJECTS, CONFIG)
    assert (await js.stream_info("ORE_EVENTS")).config.subjects == ["elsewhere.>"]


async def test_a_consumer_with_another_filter_is_refused(ore_nats_client: Client) -> None:
    js = ore_nats_client.jetstream()
    await ensure_streams(js, SUBJECTS, BusConfig(partitions=1))
    await js.delete_consumer("ORE_IN", consumer_name(0))
    await js.add_consumer(
        "ORE_IN", ConsumerConfig(durable_name=consumer_name(0), filter_subject="ore.inp.0.only.x")
    )

    with pytest.raises(BusConfigError, match=r"ore-core-p0.*filter_subject"):
        await ensure_streams(js, SUBJECTS, BusConfig(partitions=1))


async def test_another_prefix_gets_streams_of_its_own(ore_nats_client: Client) -> None:
    js = ore_nats_client.jetstream()
    await ensure_streams(js, SUBJECTS, CONFIG)

    await ensure_streams(js, Subjects("acme"), CONFIG)

    assert (await js.stream_info("ACME_IN")).config.subjects == ["acme.in.*.*"]
    assert (await js.stream_info("ORE_IN")).config.subjects == ["ore.in.*.*"]


def test_a_partition_count_that_is_not_a_power_of_two_is_refused() -> None:
    with pytest.raises(BusConfigError, match="power of two"):
        BusConfig(partitions=6)


async def test_rewinding_redelivers_the_unacknowledged_messages_first_and_at_once(
    ore_nats_client: Client,
) -> None:
    js = ore_nats_client.jetstream()
    await ensure_streams(js, SUBJECTS, CONFIG)
    partition = partition_of("t1", CONFIG.partitions)
    for n in range(3):
        await js.publish("ore.in.ns.t1", f"m{n}".encode())
    sub = await js.pull_subscribe_bind(consumer_name(partition), "ORE_IN")
    first, _unacked = await sub.fetch(2, timeout=5)
    await first.ack_sync()  # m0 handled; m1 delivered and never acknowledged (a crash)
    await sub.unsubscribe()

    assert await reset_consumer(js, SUBJECTS, CONFIG, partition) == 2  # ack floor 1, + 1
    await ensure_streams(js, SUBJECTS, dataclasses.replace(CONFIG, ack_wait=20.0))  # an update

    sub = await js.pull_subscribe_bind(consumer_name(partition), "ORE_IN")
    again = await sub.fetch(2, timeout=5)  # now, not after ack_wait
    assert [m.data for m in again] == [b"m1", b"m2"]
    assert await reset_consumer(js, SUBJECTS, CONFIG, 0 if partition else 1) is None


async def test_a_consumer_rewound_by_another_worker_meanwhile_keeps_its_start(
    ore_nats_client: Client,
) -> None:
    """A worker starting while another takes a crashed worker's partition over: its
    layout check found the consumer missing (deleted by the rewind) and by the time it
    creates it, the rewind has created it again from a start sequence. It failed to start
    ('deliver policy can not be updated', a CI run of the NATS-restart fault test)."""
    js = ore_nats_client.jetstream()
    await ensure_streams(js, SUBJECTS, CONFIG)
    entry = next(c for c in build_layout(SUBJECTS, CONFIG).consumers if c.name.endswith("p0"))
    await js.delete_consumer("ORE_IN", entry.name)  # the other worker's rewind...
    rewound = dataclasses.replace(
        entry.config, deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=7
    )
    await js.add_consumer("ORE_IN", rewound)  # ...done before our create lands
    with pytest.raises(APIError):  # what a plain create of our config meets
        await js.add_consumer("ORE_IN", entry.config)

    await _put_consumer(js, entry, missing=True)  # as ensure_layout creates a missing one

    info = await js.consumer_info("ORE_IN", entry.name)
    assert (info.config.deliver_policy, info.config.opt_start_seq) == (
        DeliverPolicy.BY_START_SEQUENCE,
        7,
    )


async def test_a_settling_cluster_is_waited_for_and_other_refusals_are_not() -> None:
    """ "No suitable peers for placement" (a peer not yet seen online) is retried until
    the cluster settles; any other refusal stands at once, as one line."""
    calls: list[int] = []

    async def placement(code: int, fail: int) -> str:
        calls.append(code)
        if len(calls) <= fail:
            raise APIError(code=500, err_code=code, description="no suitable peers for placement")
        return "created"

    assert await settled_call("create stream X", lambda: placement(10005, 2)) == "created"
    assert calls == [10005, 10005, 10005]

    calls.clear()
    with pytest.raises(BusError, match=r"JetStream refused create stream X: .* \(error 10052\)"):
        await settled_call("create stream X", lambda: placement(10052, 5))
    assert calls == [10052]
