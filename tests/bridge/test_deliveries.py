"""Delivery reports, the platform id map and deletes (issue 29), on a real core and NATS."""

from __future__ import annotations

from typing import Any

from nats.aio.client import Client

from tests.bridge.test_links_relay import THREAD, call, link, start_shared, watch
from tests.bus.conftest import CoreFactory, publish, wait_for


def report(turn: str, status: str, **extra: Any) -> dict[str, Any]:
    return {"thread": THREAD, "sequence": 2, "turn": turn, "status": status, **extra}


async def first_user_turn(nc: Client) -> str:
    turns = (await call(nc, "ore.admin.threads.turns", {"id": THREAD}))["turns"]
    turn_id: str = turns[0]["id"]
    return turn_id


async def test_a_delivered_copy_s_platform_ids_resolve_both_ways(
    start_core: CoreFactory, ore_nats_client: Client
) -> None:
    nc = ore_nats_client
    await start_shared(start_core, nc)
    await link(nc)
    turn = await first_user_turn(nc)
    ids = ["C-42/1712.0001", "C-42/1712.0002"]
    answer = await call(
        nc, "ore.api.beta.deliveries.report", report(turn, "delivered", platform_ids=ids)
    )
    assert answer == {"recorded": True}
    for platform_id in ids:
        found = await call(nc, "ore.api.beta.deliveries.lookup", {"platform_id": platform_id})
        assert found == {"thread": THREAD, "turn": turn}
    got = await call(nc, "ore.api.beta.deliveries.get", {"thread": THREAD, "turn": turn})
    assert got == {"platform_ids": ids, "status": "delivered"}


async def test_a_copy_is_claimed_as_sending_once(
    start_core: CoreFactory, ore_nats_client: Client
) -> None:
    nc = ore_nats_client
    await start_shared(start_core, nc)
    await link(nc)
    turn = await first_user_turn(nc)
    subject = "ore.api.beta.deliveries.report"
    sending = report(turn, "sending", platform_ids=["m1"])
    first = await call(nc, subject, sending)
    again = await call(nc, subject, sending)
    assert first == {"recorded": True, "platform_ids": ["m1"], "status": "sending"}
    assert again == {"recorded": False, "platform_ids": ["m1"], "status": "sending"}
    got = await call(nc, "ore.api.beta.deliveries.get", {"thread": THREAD, "turn": turn})
    assert got == {"platform_ids": ["m1"], "status": "sending"}


async def test_a_claim_of_a_delivered_copy_answers_delivered(
    start_core: CoreFactory, ore_nats_client: Client
) -> None:
    nc = ore_nats_client
    await start_shared(start_core, nc)
    await link(nc)
    turn = await first_user_turn(nc)
    subject = "ore.api.beta.deliveries.report"
    await call(nc, subject, report(turn, "sending", platform_ids=["m1"]))
    await call(nc, subject, report(turn, "delivered", platform_ids=["m1"]))
    claim = await call(nc, subject, report(turn, "sending", platform_ids=["m1"]))
    assert claim == {"recorded": False, "platform_ids": ["m1"], "status": "delivered"}


async def test_the_map_survives_a_restart_of_the_core(
    start_core: CoreFactory, ore_nats_client: Client
) -> None:
    nc = ore_nats_client
    core, _ = await start_shared(start_core, nc)
    await link(nc)
    turn = await first_user_turn(nc)
    await call(nc, "ore.api.beta.deliveries.report", report(turn, "delivered", platform_ids=["m1"]))
    await core.stop(grace=0)
    await start_core()
    found = await call(nc, "ore.api.beta.deliveries.lookup", {"platform_id": "m1"})
    assert found == {"thread": THREAD, "turn": turn}


async def test_a_namespace_never_resolves_another_s_platform_ids(
    start_core: CoreFactory, ore_nats_client: Client
) -> None:
    nc = ore_nats_client
    await start_shared(start_core, nc)
    await link(nc)
    turn = await first_user_turn(nc)
    await call(nc, "ore.api.beta.deliveries.report", report(turn, "delivered", platform_ids=["m1"]))
    found = await call(nc, "ore.api.alpha.deliveries.lookup", {"platform_id": "m1"})
    assert found["error"]["code"] == "not_found"


async def test_an_unlinked_namespace_cannot_report_on_the_thread(
    start_core: CoreFactory, ore_nats_client: Client
) -> None:
    nc = ore_nats_client
    await start_shared(start_core, nc)
    turn = await first_user_turn(nc)
    answer = await call(
        nc, "ore.api.gamma.deliveries.report", report(turn, "delivered", platform_ids=["x"])
    )
    assert answer["error"]["code"] == "not_found"
    answer = await call(nc, "ore.api.gamma.deliveries.get", {"thread": THREAD, "turn": turn})
    assert answer["error"]["code"] == "not_found"


async def test_a_failed_copy_becomes_a_stored_delivery_event_the_origin_sees(
    start_core: CoreFactory, ore_nats_client: Client
) -> None:
    nc = ore_nats_client
    _, alpha = await start_shared(start_core, nc)
    await link(nc)
    turn = await first_user_turn(nc)
    body = report(turn, "failed", detail="429 for 60 s")
    assert await call(nc, "ore.api.beta.deliveries.report", body) == {"recorded": True}

    def delivery_events() -> list[dict[str, Any]]:
        return [e for e in alpha.events() if e["kind"] == "delivery"]

    await wait_for(lambda: len(delivery_events()) == 1)
    assert delivery_events()[0] == {
        "kind": "delivery",
        "turn": turn,
        "endpoint": "beta",
        "status": "failed",
        "detail": "429 for 60 s",
        "context": {"provenance": "beta"},
    }
    read = await call(nc, "ore.api.alpha.events.read", {"thread": THREAD})
    assert any(
        e.get("kind") == "delivery" for entry in read["events"] for e in entry["event"]["events"]
    )


async def test_a_copy_delivered_after_retrying_is_told_and_one_delivered_at_once_is_not(
    start_core: CoreFactory, ore_nats_client: Client
) -> None:
    nc = ore_nats_client
    _, alpha = await start_shared(start_core, nc)
    await link(nc)
    turn = await first_user_turn(nc)
    for status in ("delivered", "retrying", "delivered", "delivered"):
        body = report(turn, status, platform_ids=["m1"] if status == "delivered" else [])
        await call(nc, "ore.api.beta.deliveries.report", body)
    marker = report(turn, "failed", detail="the end")  # the last event, to wait for
    await call(nc, "ore.api.beta.deliveries.report", marker)

    def statuses() -> list[str]:
        return [e["status"] for e in alpha.events() if e["kind"] == "delivery"]

    await wait_for(lambda: statuses()[-1:] == ["failed"])
    assert statuses() == ["retrying", "delivered", "failed"]


async def test_a_bad_report_is_refused(start_core: CoreFactory, ore_nats_client: Client) -> None:
    nc = ore_nats_client
    await start_shared(start_core, nc)
    await link(nc)
    for body in (
        report("t1", "lost"),
        report("../x", "delivered"),
        report("t1", "delivered", platform_ids=[""]),
        {**report("t1", "delivered"), "extra": 1},
    ):
        answer = await call(nc, "ore.api.beta.deliveries.report", body)
        assert answer["error"]["code"] == "bad_request", body


async def test_a_delete_makes_a_tombstone_and_tells_every_endpoint(
    start_core: CoreFactory, ore_nats_client: Client
) -> None:
    nc = ore_nats_client
    _, alpha = await start_shared(start_core, nc)
    beta = await watch(nc, "beta")
    await link(nc)
    turn = await first_user_turn(nc)
    delete = {"kind": "delete", "id": "b-del-1", "turn_id": turn}
    await publish(nc, THREAD, delete, namespace="beta")
    await wait_for(lambda: alpha.done() == 2 and beta.done() == 1)
    for endpoint in (alpha, beta):
        (deleted,) = [e for e in endpoint.events() if e["kind"] == "turn_deleted"]
        assert deleted["turn"] == turn
    active = (await call(nc, "ore.admin.threads.turns", {"id": THREAD}))["turns"]
    assert turn not in [t["id"] for t in active]  # skipped: the model no longer sees it


async def test_deleting_an_unknown_turn_is_an_error_and_changes_nothing(
    start_core: CoreFactory, ore_nats_client: Client
) -> None:
    nc = ore_nats_client
    _, alpha = await start_shared(start_core, nc)
    before = (await call(nc, "ore.admin.threads.turns", {"id": THREAD}))["turns"]
    delete = {"kind": "delete", "id": "a-del-1", "turn_id": "no-such-turn"}
    await publish(nc, THREAD, delete, namespace="alpha")
    await wait_for(lambda: alpha.done() == 2)
    assert [e["code"] for e in alpha.events() if e["kind"] == "error"] == ["unknown_turn"]
    assert (await call(nc, "ore.admin.threads.turns", {"id": THREAD}))["turns"] == before


async def test_a_delete_to_an_unknown_thread_is_rejected(
    start_core: CoreFactory, ore_nats_client: Client
) -> None:
    nc = ore_nats_client
    await start_core()
    nowhere = await watch(nc, "alpha", "never-made")
    await publish(
        nc, "never-made", {"kind": "delete", "id": "d1", "turn_id": "t"}, namespace="alpha"
    )
    await wait_for(lambda: nowhere.done() == 1)
    assert [e["code"] for e in nowhere.events() if e["kind"] == "error"] == ["unknown_thread"]
