"""Delivery reports, the platform id map and deletes (issue 29), on a real core and NATS.

The linked thread is the one of `tests/bridge/linked.py` (the `shared` and `linked`
fixtures): made by alpha, BETA linked to it; beta reports on the copies of its turns.
"""

from __future__ import annotations

from typing import Any

from nats.aio.client import Client

from tests.bridge.linked import THREAD, Linked, LinkedThread, watch
from tests.bus import raw
from tests.bus.conftest import CoreFactory

REPORT = "ore.api.beta.deliveries.report"


def report(turn: str, status: str, **extra: Any) -> dict[str, Any]:
    return {"thread": THREAD, "sequence": 2, "turn": turn, "status": status, **extra}


async def first_user_turn(thread: LinkedThread) -> str:
    turn_id: str = (await thread.turns())[0]["id"]
    return turn_id


async def test_a_delivered_copy_s_platform_ids_resolve_both_ways(linked: Linked) -> None:
    turn = await first_user_turn(linked)
    ids = ["C-42/1712.0001", "C-42/1712.0002"]
    answer = await linked.call(REPORT, report(turn, "delivered", platform_ids=ids))
    assert answer == {"recorded": True}
    for platform_id in ids:
        found = await linked.call("ore.api.beta.deliveries.lookup", {"platform_id": platform_id})
        assert found == {"thread": THREAD, "turn": turn}
    got = await linked.call("ore.api.beta.deliveries.get", {"thread": THREAD, "turn": turn})
    assert got == {"platform_ids": ids, "status": "delivered"}


async def test_a_copy_is_claimed_as_sending_once(linked: Linked) -> None:
    turn = await first_user_turn(linked)
    sending = report(turn, "sending", platform_ids=["m1"])
    first = await linked.call(REPORT, sending)
    again = await linked.call(REPORT, sending)
    assert first == {"recorded": True, "platform_ids": ["m1"], "status": "sending"}
    assert again == {"recorded": False, "platform_ids": ["m1"], "status": "sending"}
    got = await linked.call("ore.api.beta.deliveries.get", {"thread": THREAD, "turn": turn})
    assert got == {"platform_ids": ["m1"], "status": "sending"}


async def test_a_claim_of_a_delivered_copy_answers_delivered(linked: Linked) -> None:
    turn = await first_user_turn(linked)
    await linked.call(REPORT, report(turn, "sending", platform_ids=["m1"]))
    await linked.call(REPORT, report(turn, "delivered", platform_ids=["m1"]))
    claim = await linked.call(REPORT, report(turn, "sending", platform_ids=["m1"]))
    assert claim == {"recorded": False, "platform_ids": ["m1"], "status": "delivered"}


async def test_the_map_survives_a_restart_of_the_core(
    linked: Linked, start_core: CoreFactory
) -> None:
    turn = await first_user_turn(linked)
    await linked.call(REPORT, report(turn, "delivered", platform_ids=["m1"]))
    await linked.core.stop(grace=0)
    await start_core()
    found = await linked.call("ore.api.beta.deliveries.lookup", {"platform_id": "m1"})
    assert found == {"thread": THREAD, "turn": turn}


async def test_a_namespace_never_resolves_another_s_platform_ids(linked: Linked) -> None:
    turn = await first_user_turn(linked)
    await linked.call(REPORT, report(turn, "delivered", platform_ids=["m1"]))
    found = await linked.call("ore.api.alpha.deliveries.lookup", {"platform_id": "m1"})
    assert found["error"]["code"] == "not_found"


async def test_an_unlinked_namespace_cannot_report_on_the_thread(shared: LinkedThread) -> None:
    turn = await first_user_turn(shared)
    body = report(turn, "delivered", platform_ids=["x"])
    answer = await shared.call("ore.api.gamma.deliveries.report", body)
    assert answer["error"]["code"] == "not_found"
    answer = await shared.call("ore.api.gamma.deliveries.get", {"thread": THREAD, "turn": turn})
    assert answer["error"]["code"] == "not_found"


async def test_a_failed_copy_becomes_a_stored_delivery_event_the_origin_sees(
    linked: Linked,
) -> None:
    turn = await first_user_turn(linked)
    body = report(turn, "failed", detail="429 for 60 s")
    assert await linked.call(REPORT, body) == {"recorded": True}
    await raw.wait_for(lambda: len(linked.alpha.of_kind("delivery")) == 1)
    assert linked.alpha.of_kind("delivery")[0] == {
        "kind": "delivery",
        "turn": turn,
        "endpoint": "beta",
        "status": "failed",
        "detail": "429 for 60 s",
        "context": {"provenance": "beta"},
    }
    read = await linked.call("ore.api.alpha.events.read", {"thread": THREAD})
    assert any(
        e.get("kind") == "delivery" for entry in read["events"] for e in entry["event"]["events"]
    )


async def test_a_copy_delivered_after_retrying_is_told_and_one_delivered_at_once_is_not(
    linked: Linked,
) -> None:
    turn = await first_user_turn(linked)
    for status in ("delivered", "retrying", "delivered", "delivered"):
        body = report(turn, status, platform_ids=["m1"] if status == "delivered" else [])
        await linked.call(REPORT, body)
    marker = report(turn, "failed", detail="the end")  # the last event, to wait for
    await linked.call(REPORT, marker)

    def statuses() -> list[str]:
        return [e["status"] for e in linked.alpha.of_kind("delivery")]

    await raw.wait_for(lambda: statuses()[-1:] == ["failed"])
    assert statuses() == ["retrying", "delivered", "failed"]


async def test_a_bad_report_is_refused(linked: Linked) -> None:
    for body in (
        report("t1", "lost"),
        report("../x", "delivered"),
        report("t1", "delivered", platform_ids=[""]),
        {**report("t1", "delivered"), "extra": 1},
    ):
        answer = await linked.call(REPORT, body)
        assert answer["error"]["code"] == "bad_request", body


async def test_a_delete_makes_a_tombstone_and_tells_every_endpoint(linked: Linked) -> None:
    turn = await first_user_turn(linked)
    delete = {"kind": "delete", "id": "b-del-1", "turn_id": turn}
    await raw.publish(linked.nc, THREAD, delete, namespace="beta")
    await raw.wait_for(lambda: linked.alpha.done() == 2 and linked.beta.done() == 1)
    for endpoint in (linked.alpha, linked.beta):
        (deleted,) = endpoint.of_kind("turn_deleted")
        assert deleted["turn"] == turn
    active = await linked.turns()
    assert turn not in [t["id"] for t in active]  # skipped: the model no longer sees it


async def test_deleting_an_unknown_turn_is_an_error_and_changes_nothing(
    shared: LinkedThread,
) -> None:
    before = await shared.turns()
    delete = {"kind": "delete", "id": "a-del-1", "turn_id": "no-such-turn"}
    await raw.publish(shared.nc, THREAD, delete, namespace="alpha")
    await raw.wait_for(lambda: shared.alpha.done() == 2)
    assert [e["code"] for e in shared.alpha.of_kind("error")] == ["unknown_turn"]
    assert await shared.turns() == before


async def test_a_delete_to_an_unknown_thread_is_rejected(
    start_core: CoreFactory, ore_nats_client: Client
) -> None:
    nc = ore_nats_client
    await start_core()
    nowhere = await watch(nc, "alpha", "never-made")
    await raw.publish(
        nc, "never-made", {"kind": "delete", "id": "d1", "turn_id": "t"}, namespace="alpha"
    )
    await raw.wait_for(lambda: nowhere.done() == 1)
    assert [e["code"] for e in nowhere.of_kind("error")] == ["unknown_thread"]
