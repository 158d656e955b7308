"""The page's delivery line: a `retrying` report is gone once `delivered` follows (issue 41)."""

from __future__ import annotations

from ore_conduit_web.relays import History
from ore_core import Role, Text, Turn
from ore_core.conduit import Delivery
from ore_core.conduit.relay import ThreadSettings
from ore_core.events import DeliveryEvent, EventContext, TurnCompleteEvent


def history_of(*events: object) -> History:
    history = History(ThreadSettings(gateway="g"), "web")
    for sequence, event in enumerate(events, 1):
        history.add(Delivery.of_value("t", event.kind, event.model_dump(mode="json"), sequence))  # type: ignore[attr-defined]
    return history


def test_a_retrying_copy_delivered_afterwards_leaves_no_line() -> None:
    turn = Turn(id="u1", role=Role.USER, artifacts=(Text("hi"),))
    own = TurnCompleteEvent.of(turn, EventContext(provenance="web"))
    retrying = DeliveryEvent(turn=turn.id, endpoint="nats", status="retrying", detail="429")
    delivered = DeliveryEvent(turn=turn.id, endpoint="nats", status="delivered")
    assert [d.status for d in history_of(own, retrying).deliveries_of(turn.id)] == ["retrying"]
    assert history_of(own, retrying, delivered).deliveries_of(turn.id) == []
