"""A linked thread as the web shows it (bridging, issue 29).

A web thread can be one endpoint of a gateway: the NATS conduit, Slack or a terminal
write into the same ore thread. The page shows the thread's ledger, so what the other
endpoints write is already in it; this module says, through the SDK's `classify`, how
each event and turn is shown: another endpoint's message with its sender's label
(`{name} ({conduit})`), answers by the gateway's `answer` setting (an answer to another
endpoint's message is `hidden` unless it is `all`), edits (`edit_of`) and deletes
(`turn_deleted`) of other endpoints, and the delivery status other endpoints reported
for the page's own messages (stored `delivery` events). The API and the event stream
carry the same `RelayView`.

"Delivered" for the web: a relayed copy is delivered once it is stored in the thread's
event stream, which every page of the thread reads (live, or from its `Last-Event-ID`
after a reconnect). The conduit reports it when its live feed sees it, with the event
id `SEQUENCE.INDEX` as the platform id; nothing can fail after that, so the web never
reports `retrying` or `failed`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from ore_core import Role, TurnCompleteEvent
from ore_core.conduit import (
    ApiError,
    BusError,
    ConduitClient,
    Delivery,
    Relayed,
    SettingsCache,
    ThreadSettings,
    classify,
)
from ore_core.events import DeliveryEvent, PropertiesEvent, TurnDeletedEvent

__all__ = [
    "DeliveryView",
    "History",
    "RelayView",
    "Relays",
    "annotate",
    "relay_view",
    "stored_delivery",
    "with_relay",
]

_ANNOTATED = frozenset(("turn_complete", "turn_deleted", "delivery"))


class RelayView(BaseModel):
    """Where an event or turn came from and how the page shows it.

    `action` is the SDK's `RelayAction`: `own` (this page's own message), `relayed` and
    `edited` (another endpoint's message, shown as `label`; `edit_of` names the turn an
    edit replaces), `answer` (shown), `hidden` (an answer to another endpoint's message
    under `answer = "origin"` or `"none"`), `deleted`, `delivery`. `origin` is the
    conduit namespace it came from (`""`: the thread itself), `sender` the display name
    of a user message's author.
    """

    action: str
    origin: str = ""
    sender: str = ""
    label: str = ""
    edit_of: str = ""
    reply_to: str = ""


class DeliveryView(BaseModel):
    """How another endpoint's copy of this page's message fared (`retrying`, `failed`)."""

    endpoint: str
    status: str
    detail: str = ""


def relay_view(relayed: Relayed, delivery: Delivery) -> RelayView:
    """The `RelayView` of what `classify` said about `delivery`."""
    event = delivery.event
    sender = ""
    if isinstance(event, TurnCompleteEvent) and event.turn.role == Role.USER:
        sender = dict(event.turn.extra).get("sender") or event.context.user_name
    return RelayView(
        action=relayed.action,
        origin=relayed.origin,
        sender=sender,
        label=relayed.label,
        edit_of=relayed.edit_of,
        reply_to=relayed.reply_to,
    )


class Relays:
    """The rendering settings of the namespace's threads (`ore.gateway.*` metadata).

    Loaded on first use (from metadata the API read anyway, else `threads.get`) and
    kept current by the `properties` events of the live feed.
    """

    def __init__(self, client: ConduitClient) -> None:
        self.namespace = client.namespace
        self._client = client
        self._cache = SettingsCache()

    def know(self, thread_id: str, metadata: Mapping[str, str]) -> None:
        """Settings from metadata just read (kept if the thread is known already: the
        live feed's `properties` events are newer than any read)."""
        if thread_id not in self._cache:
            self._cache.load(thread_id, metadata)

    async def settings(self, thread_id: str) -> ThreadSettings:
        """The thread's settings; the defaults (not kept) while the core is away."""
        if thread_id not in self._cache:
            try:
                info = await self._client.get_thread(thread_id)
            except (ApiError, BusError):
                return ThreadSettings()
            self._cache.load(thread_id, info.metadata)
        return self._cache.get(thread_id)

    def classify(self, delivery: Delivery) -> Relayed:
        """What the page does with `delivery` (a `properties` event updates the cache).

        Call `settings` for the thread first, so a thread never seen is not read with
        the defaults."""
        event = delivery.event
        if isinstance(event, PropertiesEvent):
            self._cache.update(delivery.thread_id, event)
        return classify(delivery, self.namespace, self._cache.get(delivery.thread_id))

    def annotate(self, delivery: Delivery) -> tuple[Relayed, RelayView | None]:
        """`annotate` of a live feed's stored event (a `properties` event updates the
        cache)."""
        return _annotated(self.classify(delivery), delivery)


def annotate(
    delivery: Delivery, namespace: str, settings: ThreadSettings
) -> tuple[Relayed, RelayView | None]:
    """`classify` of a stored event and the view the event stream adds to it (None: an
    answer or a setting, shown as the page shows its own conversation)."""
    return _annotated(classify(delivery, namespace, settings), delivery)


def _annotated(relayed: Relayed, delivery: Delivery) -> tuple[Relayed, RelayView | None]:
    if relayed.action in ("answer", "settings") and delivery.kind not in _ANNOTATED:
        return relayed, None
    return relayed, relay_view(relayed, delivery)


def with_relay(data: str, view: RelayView | None) -> str:
    """An event's JSON object `data` with its `relay` view added."""
    if view is None:
        return data
    return f'{data[:-1]},"relay":{view.model_dump_json()}}}'


@dataclass(slots=True)
class History:
    """What the stored events of a thread say about its turns, for the page's tree
    (read with the thread's `settings`, by the endpoint of `namespace`)."""

    settings: ThreadSettings
    namespace: str
    relays: dict[str, RelayView] = field(default_factory=dict)
    deleted: set[str] = field(default_factory=set)
    deliveries: dict[str, dict[str, DeliveryView]] = field(default_factory=dict)

    def add(self, delivery: Delivery) -> None:
        """Take in one stored event."""
        relayed = classify(delivery, self.namespace, self.settings)
        event = delivery.event
        if isinstance(event, TurnCompleteEvent):
            self.relays.setdefault(event.turn.id, relay_view(relayed, delivery))
        elif isinstance(event, TurnDeletedEvent):
            self.deleted.add(event.turn)
        elif isinstance(event, DeliveryEvent):
            per_endpoint = self.deliveries.setdefault(event.turn, {})
            if event.status == "delivered":  # after a retry: nothing left to say
                per_endpoint.pop(event.endpoint, None)
                return
            per_endpoint[event.endpoint] = DeliveryView(
                endpoint=event.endpoint, status=event.status, detail=event.detail
            )

    def deliveries_of(self, turn_id: str) -> list[DeliveryView]:
        """The latest status each endpoint reported for `turn_id`, if it is the page's own."""
        relay = self.relays.get(turn_id)
        if relay is None or relay.action != "own":
            return []
        return list(self.deliveries.get(turn_id, {}).values())


def stored_delivery(thread_id: str, value: dict[str, Any], sequence: int) -> Delivery:
    """A stored event's parsed JSON as a `Delivery` (decoded when first looked at)."""
    return Delivery.of_value(thread_id, str(value.get("kind", "")), value, sequence)
