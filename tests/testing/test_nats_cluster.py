"""The embedded 3-node JetStream cluster (each test starts one: about a second)."""

import asyncio
import socket

import nats
import pytest
from nats.js.api import PubAck, StorageType
from nats.js.client import JetStreamContext
from nats.js.errors import NoStreamResponseError

from ore_core.testing import cluster as cluster_module
from ore_core.testing.cluster import EmbeddedNatsCluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(60)]


async def test_r3_stream_on_the_cluster_replicates_what_is_published(
    ore_nats_cluster: EmbeddedNatsCluster,
) -> None:
    assert len(set(ore_nats_cluster.urls)) == 3
    client = await nats.connect(servers=ore_nats_cluster.urls)
    try:
        # Creating an R3 stream waits for a Raft election: on a loaded machine that takes
        # longer than nats-py's 5 s default. The timeout only bounds a hang.
        js = client.jetstream(timeout=30)
        info = await js.add_stream(
            name="R3", subjects=["r3.>"], num_replicas=3, storage=StorageType.FILE
        )
        ack = await _publish_once_the_stream_answers(js, "r3.t1", b"replicated")
        stored = await js.get_msg("R3", ack.seq)
    finally:
        await client.close()
    assert info.cluster is not None
    assert len(info.cluster.replicas or []) == 2
    assert stored.data == b"replicated"


async def _publish_once_the_stream_answers(
    js: JetStreamContext, subject: str, payload: bytes
) -> PubAck:
    """Publish to a stream created a moment ago: until its Raft group has a leader whose
    interest has reached the node we talk to, a publish finds no responder (nothing is
    stored then, so trying again cannot double it). The deadline only bounds a hang."""
    deadline = asyncio.get_running_loop().time() + 30
    while True:
        try:
            return await js.publish(subject, payload)
        except NoStreamResponseError:
            if asyncio.get_running_loop().time() > deadline:
                raise
            await asyncio.sleep(0.1)


def test_cluster_start_retries_on_new_ports_when_a_cluster_port_was_taken(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken = squatter.getsockname()[1]
        picks = iter([[taken, *cluster_module._free_ports(2)]])
        real_free_ports = cluster_module._free_ports
        monkeypatch.setattr(
            cluster_module, "_free_ports", lambda count: next(picks, None) or real_free_ports(count)
        )
        with EmbeddedNatsCluster(3) as cluster:
            assert all(node.running for node in cluster.nodes)
