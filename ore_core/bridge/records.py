"""The records of KV bucket `ORE_LINKS` (core only): who reaches which thread.

- `ep.<NS>.<h>`: `EndpointRecord`, the thread an endpoint belongs to. Created with
  create-only, so an endpoint never belongs to two threads.
- `th.<T>`: `LinkSet`, the thread's links and settings. Changed by compare-and-set on
  the KV revision. It is the truth: an `ep` record it does not list is an orphan (a
  crash between the two writes) and means nothing.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from ore_core.endpoint import Answer, Direction, Endpoint
from ore_core.ids import validate_thread_id

__all__ = [
    "DEFAULT_LABEL",
    "EndpointRecord",
    "LinkSet",
    "LinkedEndpoint",
    "endpoint_key",
    "thread_key",
]

DEFAULT_LABEL = "{name} ({conduit})"
"""How a relayed message is labelled by default (matterbridge's RemoteNickFormat)."""
MAX_LABEL_LENGTH = 200


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LinkedEndpoint(_Record):
    """One endpoint as a thread's link set lists it."""

    namespace: str
    key: str
    value: str
    direction: Direction

    @property
    def endpoint(self) -> Endpoint:
        return Endpoint(self.namespace, self.key, self.value)


class EndpointRecord(LinkedEndpoint):
    """`ep.<NS>.<h>`: the endpoint, its thread and the gateway that declared it."""

    thread: Annotated[str, AfterValidator(validate_thread_id)]
    gateway: str | None = None


class LinkSet(_Record):
    """`th.<T>`: a thread's home namespace, settings and linked endpoints."""

    home: str
    gateway: str | None = None
    answer: Answer = "origin"
    label: str = Field(default=DEFAULT_LABEL, max_length=MAX_LABEL_LENGTH)
    reaction_lines: bool = False
    endpoints: tuple[LinkedEndpoint, ...] = ()

    def find(self, endpoint: Endpoint) -> LinkedEndpoint | None:
        """The listed endpoint equal to `endpoint`, if any."""
        for linked in self.endpoints:
            if linked.endpoint == endpoint:
                return linked
        return None

    def of_namespace(self, namespace: str) -> LinkedEndpoint | None:
        """The endpoint of `namespace` (a thread lists at most one per namespace)."""
        for linked in self.endpoints:
            if linked.namespace == namespace:
                return linked
        return None

    def copies(self) -> tuple[str, ...]:
        """Namespaces other than home that are shown the thread (out or inout)."""
        return tuple(
            linked.namespace
            for linked in self.endpoints
            if linked.direction != "in" and linked.namespace != self.home
        )


def endpoint_key(endpoint: Endpoint) -> str:
    """`ep.<NS>.<h>`: the KV key of an endpoint's record."""
    return f"ep.{endpoint.namespace}.{endpoint.hash}"


def thread_key(thread_id: str) -> str:
    """`th.<T>`: the KV key of a thread's link set."""
    return f"th.{thread_id}"
