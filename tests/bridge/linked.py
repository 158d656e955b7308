"""A linked thread on a real core, as raw protocol.md clients see it (issue 29).

Written once for bridging's tests: THREAD is made by conduit `alpha` (its home) and an
operator links `beta`'s endpoint BETA to it through `P.admin.links.add`. `Endpoint` is
what one namespace's subscriber got on `ore.out.NS.T`; `LinkedThread` holds the core,
the connection and alpha's view, and says the admin and API calls by name.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from nats.aio.client import Client
from nats.aio.msg import Msg

from ore_core.bus.service import CoreService
from tests.bus import raw

THREAD = "shared-1"
BETA = {"namespace": "beta", "key": "beta.channel", "value": "C-42"}


async def call(nc: Client, subject: str, body: dict[str, Any]) -> dict[str, Any]:
    """One request on `subject` with a JSON body; its JSON answer."""
    reply = await nc.request(subject, json.dumps(body).encode(), timeout=raw.TIMEOUT)
    answer: dict[str, Any] = json.loads(reply.data)
    return answer


async def link(
    nc: Client, thread: str = THREAD, endpoint: dict[str, str] = BETA, **extra: Any
) -> dict[str, Any]:
    """`P.admin.links.add`: link `endpoint` to `thread` (`answer`, `direction` ... in extra)."""
    return await call(nc, "ore.admin.links.add", {"thread": thread, "endpoint": endpoint, **extra})


@dataclass
class Endpoint:
    """What one namespace's subscriber got on `ore.out.NS.T`, in arrival order."""

    messages: list[Msg] = field(default_factory=list)

    async def receive(self, msg: Msg) -> None:
        self.messages.append(msg)

    def events(self) -> list[dict[str, Any]]:
        return [event for m in self.messages for event in raw.unpack(m.data)]

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        """The events of one kind (`error`, `delivery`, `turn_deleted` ...), in order."""
        return [event for event in self.events() if event["kind"] == kind]

    def stored(self) -> list[int]:
        """The Nats-Sequence of every stored batch received, in arrival order."""
        return [
            int(m.headers["Nats-Sequence"])
            for m in self.messages
            if m.headers and "Nats-Sequence" in m.headers
        ]

    def done(self) -> int:
        return sum(1 for e in self.events() if e["kind"] == "lifecycle" and e["phase"] == "done")

    def user_turns(self) -> list[str]:
        """The text of every user turn_complete received (stored batches only)."""
        return [
            e["turn"]["artifacts"][0]["data"]["content"]
            for m in self.messages
            if m.headers and "Nats-Sequence" in m.headers
            for e in raw.unpack(m.data)
            if e["kind"] == "turn_complete" and e["turn"]["role"] == "user"
        ]


async def watch(nc: Client, namespace: str, thread: str = THREAD) -> Endpoint:
    """Subscribe to `ore.out.NAMESPACE.THREAD` from now on."""
    endpoint = Endpoint()
    await nc.subscribe(f"ore.out.{namespace}.{thread}", cb=endpoint.receive)
    await nc.flush()
    return endpoint


async def answered_thread(nc: Client, thread: str = THREAD, msg_id: str = "a-0") -> Endpoint:
    """`thread` made by alpha with one message, answered; alpha's view of it."""
    alpha = await watch(nc, "alpha", thread)
    await send(nc, "alpha", "hello", msg_id, thread)
    await raw.wait_for(lambda: alpha.done() == 1)
    return alpha


async def send(
    nc: Client, namespace: str, text: str, msg_id: str, thread: str = THREAD, **fields: Any
) -> None:
    """A user message from `namespace` into `thread` (extra top-level fields in `fields`)."""
    message = {**raw.user_message(text, msg_id, namespace), **fields}
    await raw.publish(nc, thread, message, namespace=namespace)


@dataclass
class LinkedThread:
    """THREAD made by alpha (one turn answered) on a running core; alpha's view of it."""

    core: CoreService
    nc: Client
    alpha: Endpoint

    async def call(self, subject: str, body: dict[str, Any]) -> dict[str, Any]:
        return await call(self.nc, subject, body)

    async def link(self, **extra: Any) -> dict[str, Any]:
        return await link(self.nc, **extra)

    async def watch(self, namespace: str, thread: str = THREAD) -> Endpoint:
        return await watch(self.nc, namespace, thread)

    async def send(self, namespace: str, text: str, msg_id: str, **fields: Any) -> None:
        await send(self.nc, namespace, text, msg_id, **fields)

    async def turns(self) -> list[dict[str, Any]]:
        """The thread's active turns, as `P.admin.threads.turns` lists them."""
        turns: list[dict[str, Any]] = (await self.call("ore.admin.threads.turns", {"id": THREAD}))[
            "turns"
        ]
        return turns

    async def metadata(self, namespace: str | None = None) -> dict[str, Any]:
        """The thread's metadata as the admin API (or `namespace`'s API) shows it."""
        subject = f"ore.api.{namespace}.threads.get" if namespace else "ore.admin.threads.get"
        metadata: dict[str, Any] = (await self.call(subject, {"id": THREAD}))["metadata"]
        return metadata


@dataclass
class Linked(LinkedThread):
    """The shared thread with BETA linked (inout, answered), and beta's view from before."""

    beta: Endpoint
