"""Rejected input (protocol.md): acked, answered with an error, logged, dead-lettered."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest
import structlog
from nats.aio.client import Client
from nats.js.errors import APIError, NotFoundError

from ore_core._nats.codec import DEAD_LETTER_LIMIT
from ore_core.bus.server.streams import HEADER_ALLOWANCE, BusConfig
from ore_core.bus.service import CoreService
from tests.bus import raw
from tests.bus.conftest import CoreFactory, Outbox

LIMIT = 2048
LONG_THREAD = "x" * 200


@dataclass(frozen=True)
class Case:
    thread: str
    payload: dict[str, Any] | bytes
    reason: str
    headers: dict[str, str] | None = None


CASES = {
    "not json": Case("t1", b"not json", "bad_json"),
    "missing content": Case("t1", {"kind": "user_message", "id": "m-1"}, "bad_schema"),
    "unknown kind": Case("t1", {"kind": "dance", "id": "m-1"}, "bad_schema"),
    "event id too long": Case("t1", raw.user_message("hi", "i" * 300), "bad_schema"),
    "newer schema": Case("t1", raw.user_message("hi", "m-1"), "bad_schema", {"Ore-Schema": "3"}),
    "thread id too long": Case(LONG_THREAD, raw.user_message("hi", "m-1"), "bad_thread_id"),
    "interrupt for unknown thread": Case(
        "t1", {"kind": "interrupt", "id": "i-1"}, "unknown_thread"
    ),
    "over the size limit": Case("t1", raw.user_message("x" * (LIMIT + 100), "m-1"), "too_large"),
}


@pytest.fixture
async def small_core(start_core: CoreFactory) -> CoreService:
    """A core whose payload limit is small enough to exceed in a test."""
    return await start_core(config=BusConfig(partitions=raw.PARTITIONS, max_payload=LIMIT))


async def dead_letter(nc: Client, reason: str) -> dict[str, Any]:
    """The last record on `ore.dlq.<reason>`, once it is stored."""
    js = nc.jetstream()
    found: list[dict[str, Any]] = []

    async def stored() -> bool:
        try:
            msg = await js.get_last_msg("ORE_DLQ", f"ore.dlq.{reason}")
        except NotFoundError:
            return False
        found.append(json.loads(msg.data or b"{}"))
        return True

    await raw.eventually(stored)
    return found[-1]


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
async def test_bad_input_is_dead_lettered_with_its_reason(
    small_core: CoreService, ore_nats_client: Client, case: Case
) -> None:
    await raw.publish(
        ore_nats_client, case.thread, case.payload, msg_id="bad-1", headers=case.headers
    )

    record = await dead_letter(ore_nats_client, case.reason)

    assert record["reason"] == case.reason
    assert record["thread_id"] == case.thread
    assert record["subject"] == f"ore.in.raw.{case.thread}"
    assert record["detail"]
    assert record["time"].endswith("Z")
    sent = case.payload if isinstance(case.payload, bytes) else json.dumps(case.payload).encode()
    assert record["data"] == sent.decode()


@pytest.mark.parametrize(
    "case", [c for c in CASES.values() if c.reason != "bad_thread_id"], ids=lambda c: c.reason
)
async def test_bad_input_is_answered_with_an_error_then_done(
    small_core: CoreService, ore_nats_client: Client, outbox: Outbox, case: Case
) -> None:
    await raw.publish(
        ore_nats_client, case.thread, case.payload, msg_id="bad-1", headers=case.headers
    )

    events = await outbox.done(case.thread)

    assert [e["kind"] for e in events] == ["error", "lifecycle"]
    assert events[0]["code"] == case.reason


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
async def test_bad_input_is_acknowledged_and_the_worker_keeps_serving(
    small_core: CoreService, ore_nats_client: Client, outbox: Outbox, case: Case
) -> None:
    await raw.publish(
        ore_nats_client, case.thread, case.payload, msg_id="bad-1", headers=case.headers
    )
    good_thread = case.thread if case.reason != "bad_thread_id" else "t1"

    await raw.publish(ore_nats_client, good_thread, raw.user_message("still there?", "good-1"))

    await outbox.until(
        lambda: any(
            e.get("content") == "still there?"
            for e in outbox.events(good_thread)
            if e["kind"] == "text"
        )
    )
    await raw.eventually(lambda: raw.all_acknowledged(ore_nats_client))


async def test_rejected_input_is_logged_with_its_reason(
    small_core: CoreService, ore_nats_client: Client, outbox: Outbox
) -> None:
    with structlog.testing.capture_logs() as logs:
        await raw.publish(ore_nats_client, "t1", b"{oops", msg_id="bad-1")
        await outbox.done("t1")

    rejected = [line for line in logs if line["event"] == "ingress message rejected"]
    assert [(line["reason"], line["thread_id"]) for line in rejected] == [("bad_json", "t1")]


async def test_a_publish_far_over_the_limit_is_refused_to_the_publisher(
    small_core: CoreService, ore_nats_client: Client
) -> None:
    oversized = raw.user_message("x" * (LIMIT + HEADER_ALLOWANCE + 100), "m-1")

    with pytest.raises(APIError, match="maximum"):
        await raw.publish(ore_nats_client, "t1", oversized)


async def test_a_long_rejected_payload_is_cut_in_its_dead_letter_record(
    core: CoreService, ore_nats_client: Client
) -> None:
    await raw.publish(ore_nats_client, "t1", b"x" * (DEAD_LETTER_LIMIT + 1000), msg_id="bad-1")

    record = await dead_letter(ore_nats_client, "bad_json")

    assert record["data"] == "x" * DEAD_LETTER_LIMIT
    assert record["truncated"] is True


async def test_an_invalid_namespace_is_refused_every_time_a_valid_one_is_served(
    small_core: CoreService, ore_nats_client: Client, outbox: Outbox
) -> None:
    # Valid namespaces are remembered (`IngressDecoder._check_namespace`); invalid ones never.
    js = ore_nats_client.jetstream()

    async def dead_lettered(event_id: str) -> bool:
        try:
            msg = await js.get_last_msg("ORE_DLQ", "ore.dlq.bad_namespace")
        except NotFoundError:
            return False
        record = json.loads(msg.data or b"{}")
        return bool(record["namespace"] == "Bad-NS" and event_id in record["data"])

    for index in range(2):
        message = raw.user_message(f"from nowhere {index}", f"bad-ns-{index}")
        await raw.publish(ore_nats_client, "t1", message, namespace="Bad-NS")
        await raw.eventually(lambda: dead_lettered(f"bad-ns-{index}"))  # noqa: B023 (awaited here)
    for index in range(2):
        await raw.publish(ore_nats_client, "t1", raw.user_message("hi", f"good-{index}"))
        await outbox.done("t1", count=index + 1)
    await raw.eventually(lambda: raw.all_acknowledged(ore_nats_client))
