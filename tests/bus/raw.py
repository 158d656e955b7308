"""A raw client's side of protocol.md: what the bus's tests send, and how they read what came.

The tests speak only protocol.md, through a raw nats-py connection: these helpers spell
its messages (`user_message`, `publish`) and read the streams (`stored_events`), and
`eventually` / `wait_for` wait on a condition with no event to wait on.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

from nats.aio.client import Client
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js.api import ConsumerInfo

from ore_core.bus.server.streams import consumer_name
from ore_core.subjects import Subjects, partition_of

PARTITIONS = 4
TIMEOUT = 30.0
POLL = 0.02
SUBJECTS = Subjects()


def user_message(content: str, msg_id: str, provenance: str = "raw") -> dict[str, Any]:
    """An ingress user_message as protocol.md spells it."""
    return {
        "kind": "user_message",
        "id": msg_id,
        "content": content,
        "context": {"provenance": provenance},
    }


async def publish(
    nc: Client,
    thread_id: str,
    payload: dict[str, Any] | bytes,
    *,
    msg_id: str | None = None,
    headers: dict[str, str] | None = None,
    namespace: str = "raw",
) -> Any:
    """Publish to `ore.in.NS.T` (namespace `raw`) with an ack; `Nats-Msg-Id` = the event id."""
    data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    all_headers = dict(headers or {})
    if msg_id is None and isinstance(payload, dict):
        msg_id = str(payload.get("id", ""))
    if msg_id:
        all_headers["Nats-Msg-Id"] = msg_id
    # The timeout only bounds a hang: a loaded machine (or a cluster electing a leader)
    # may take longer than nats-py's 5 s default to acknowledge.
    return await nc.jetstream(timeout=30).publish(
        f"ore.in.{namespace}.{thread_id}", data, headers=all_headers or None
    )


async def eventually(check: Callable[[], Awaitable[bool]]) -> None:
    """Wait until the async `check()` holds; fail after TIMEOUT.

    For state with no event to wait on (the server's consumer state, the connection
    state of a service after a restart), it checks every POLL seconds.
    """
    async with asyncio.timeout(TIMEOUT):
        while True:
            if await check():
                return
            await asyncio.sleep(POLL)


async def wait_for(condition: Callable[[], bool]) -> None:
    """`eventually` for a plain condition."""

    async def check() -> bool:
        return condition()

    await eventually(check)


async def all_acknowledged(nc: Client) -> bool:
    """True when no partition consumer has a message pending or unacknowledged."""
    js = nc.jetstream()
    for partition in range(PARTITIONS):
        info = await js.consumer_info("ORE_IN", consumer_name(partition))
        if info.num_ack_pending or info.num_pending:
            return False
    return True


def unpack(data: bytes) -> list[dict[str, Any]]:
    """The events of one message: a batch's events in order, or the one event."""
    message = json.loads(data)
    return list(message["events"]) if message["kind"] == "batch" else [message]


async def stored_messages(nc: Client, thread_id: str) -> list[list[dict[str, Any]]]:
    """The messages stored for `thread_id` in ORE_EVENTS (each a batch), in sequence order."""
    js = nc.jetstream()
    state = (await js.stream_info("ORE_EVENTS")).state
    messages: list[list[dict[str, Any]]] = []
    if not state.last_seq or not state.messages:
        return messages
    for seq in range(state.first_seq, state.last_seq + 1):
        msg = await js.get_msg("ORE_EVENTS", seq)
        if msg.subject == f"ore.ev.raw.{thread_id}":
            assert msg.headers is not None
            assert msg.headers["Ore-Kind"] == json.loads(msg.data or b"{}")["kind"] == "batch"
            messages.append(unpack(msg.data or b""))
    return messages


async def stored_events(nc: Client, thread_id: str) -> list[dict[str, Any]]:
    """The events stored for `thread_id` in ORE_EVENTS, in sequence order."""
    return [event for batch in await stored_messages(nc, thread_id) for event in batch]


async def consumer_of(nc: Client, thread_id: str) -> ConsumerInfo:
    """The state of the partition consumer that owns `thread_id`."""
    info: ConsumerInfo = await nc.jetstream().consumer_info(
        "ORE_IN", consumer_name(partition_of(thread_id, PARTITIONS))
    )
    return info


async def until_core_answers(nc: Client, within: float = TIMEOUT) -> None:
    """Wait until a core answers its control API (a core sets it up last, once ready)."""
    async with asyncio.timeout(within):
        while True:
            try:
                await nc.request("ore.admin.health", b"{}", timeout=0.5)
                return
            except (NoRespondersError, NatsTimeoutError):
                await asyncio.sleep(0.05)
