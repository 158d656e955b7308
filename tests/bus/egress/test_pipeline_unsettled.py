"""An answer the server has not settled yet is never given up.

The fault run (kill -9 of cluster nodes under load, tests/scale/test_faults.py) lost
answers that a worker had saved: the thread's batch was never stored on `P.ev.T`, yet
its ingress message was acknowledged. Two ways the pipeline took an unsettled publish
for a settled one:

- A retry that reaches a replicated stream while its first attempt is still being
  proposed is answered "duplicate message id is in process" (10158) or, fenced,
  "wrong last sequence" without a sequence (10164: a message of the subject is in
  process). Both say the first attempt may yet be stored, or may die with its leader;
  the pipeline dropped the message as refused, and the ingress acknowledged it.
- An empty "no responders" answer was handled twice, so the message was queued for a
  retry twice: its copies, sent apart, refused each other as another writer's.

Real parts: the kit's nats-server and its 3-node cluster, Pipelines on real
connections, SIGSTOP and kill -9 of real nodes.
"""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator

import nats
import pytest
from nats.aio.client import Client
from nats.js.api import StreamConfig

from ore_core.bus.egress.pipeline import Pipeline
from ore_core.testing.cluster import EmbeddedNatsCluster
from tests.bus import raw
from tests.bus.egress.test_fence import HEADER, fence_stream, stopped, stored_on


async def test_a_message_no_stream_answered_is_sent_again_as_one_message(
    ore_nats_client: Client,
) -> None:
    pipeline = Pipeline(ore_nats_client, hold_retry=0.05)
    await pipeline.start()
    refused: list[tuple[str, int]] = []
    pipeline.watch_fenced(lambda subject, tag: refused.append((subject, tag)))
    try:
        pipeline.know("fen.a", 0)
        for n in (1, 2, 3):
            await pipeline.publish_fenced("FEN", "fen.a", b"%d" % n, HEADER, n)
        await raw.wait_for(lambda: pipeline.retried >= 4)  # no stream yet: no responders
        await fence_stream(ore_nats_client)
        await pipeline.flush()

        assert await stored_on(ore_nats_client, "fen.a") == [b"1", b"2", b"3"]
        assert (refused, pipeline.fenced, pipeline.lost) == ([], 0, 0)
    finally:
        await pipeline.stop()


@pytest.fixture
async def leader_client(ore_nats_cluster: EmbeddedNatsCluster) -> AsyncIterator[Client]:
    """A client of the cluster connected first to the node that will lead stream FEN."""

    async def quiet(error: Exception) -> None:
        """Reconnect errors are expected: the node it is connected to is killed."""

    setup = await nats.connect(servers=ore_nats_cluster.urls)
    try:
        await setup.jetstream().add_stream(
            StreamConfig(name="FEN", subjects=["fen.*"], num_replicas=3)
        )
        info = await setup.jetstream().stream_info("FEN")
    finally:
        await setup.close()
    assert info.cluster is not None
    leader = next(n for n in ore_nats_cluster.nodes if n.store_dir.name == info.cluster.leader)
    others = [n.url for n in ore_nats_cluster.nodes if n is not leader]
    client = await nats.connect(
        servers=[leader.url, *others],
        dont_randomize=True,
        reconnect_time_wait=0.1,
        max_reconnect_attempts=-1,
        error_cb=quiet,
    )
    try:
        yield client
    finally:
        await client.close()


async def test_a_batch_retried_while_its_first_attempt_is_in_process_is_stored_not_dropped(
    ore_nats_cluster: EmbeddedNatsCluster, leader_client: Client
) -> None:
    """The followers stop, so the leader cannot commit the first attempt; the retry
    after the ack timeout is answered "in process"; then the leader dies and the
    followers, resumed, elect a new one. The message and the one queued behind it on
    its subject are stored, in order, once; nothing is given up or taken as another
    writer's."""
    info = await leader_client.jetstream().stream_info("FEN")
    assert info.cluster is not None
    leader = next(n for n in ore_nats_cluster.nodes if n.store_dir.name == info.cluster.leader)
    followers = [n for n in ore_nats_cluster.nodes if n is not leader]
    pipeline = Pipeline(leader_client, ack_timeout=0.5, hold_retry=0.2)
    await pipeline.start()
    refused: list[tuple[str, int]] = []
    pipeline.watch_fenced(lambda subject, tag: refused.append((subject, tag)))
    try:
        pipeline.know("fen.a", 0)
        for node in followers:
            os.kill(node.pid, signal.SIGSTOP)
        try:
            for node in followers:
                await raw.wait_for(lambda node=node: stopped(node.pid))
            await pipeline.publish_fenced("FEN", "fen.a", b"one", HEADER, 1)
            await pipeline.publish_fenced("FEN", "fen.a", b"two", HEADER, 2)
            # The first ack timed out (retried once), and the retry was answered.
            await raw.wait_for(lambda: pipeline.retried >= 2 or pipeline.lost > 0)
            os.kill(leader.pid, signal.SIGKILL)
        finally:
            for node in followers:
                os.kill(node.pid, signal.SIGCONT)
        await pipeline.flush()

        assert (refused, pipeline.fenced, pipeline.lost) == ([], 0, 0)
        assert await stored_on(leader_client, "fen.a") == [b"one", b"two"]
    finally:
        await pipeline.stop()
